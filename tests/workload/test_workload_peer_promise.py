"""The peer engine's connector and the promise check, on the project's own data (no vLLM engine)."""

from __future__ import annotations

from kvconform.conformance.checks.claims import PROMISED_HITS
from kvconform.conformance.connectors.profiles import profile_for
from kvconform.conformance.connectors.selection import ConnectorParam
from kvconform.conformance.workload.invariants import claim_meets_promise, promised_tokens


def _param(name: str) -> ConnectorParam:
    return ConnectorParam(name, name, None, profile_for(name))


def test_a_wrappers_peer_is_its_last_child_alone():
    peer = _param("MultiConnector").last_child()
    assert peer.name == "ExampleConnector" and peer.module_path is None
    assert peer.profile.extra_config == {"shared_storage_path": "{storage}/shared"}
    assert peer.profile.roles == ["kv_both"]


def test_a_plain_connectors_peer_is_itself():
    example = _param("ExampleConnector")
    assert example.last_child() is example


def test_whole_blocks_covers_a_prompt_asked_again_or_extended_within_its_last_block():
    covers = PROMISED_HITS["whole-blocks"].covers
    assert covers(70, 70, 32) and covers(70, 96, 32) and covers(33, 33, 32)
    assert not covers(70, 97, 32) and not covers(64, 65, 32)


def test_a_short_claim_is_named_with_the_promise_and_the_stored_prompt():
    stored = {tuple(range(1, 71)): "producer"}
    prompt = list(range(1, 71))
    assert promised_tokens(prompt, stored, "whole-blocks", 32) == (64, 70)
    assert claim_meets_promise("c0", prompt, 0, 64, stored, "whole-blocks", 32) is None
    assert claim_meets_promise("c0", prompt, 32, 32, stored, "whole-blocks", 32) is None  # local hit counts
    problem = claim_meets_promise("c0", prompt, 0, 32, stored, "whole-blocks", 32)
    assert "claimed 32 external tokens after 0 computed ones, 32 in all" in problem
    assert "promises a hit of at least 64 tokens" in problem and "a 70-token prompt it starts with" in problem


def test_no_promise_for_other_prompts_or_without_a_profile_promise():
    stored = {tuple(range(1, 71)): "producer"}
    assert claim_meets_promise("c0", list(range(1, 130)), 0, 0, stored, "whole-blocks", 32) is None  # runs past
    assert claim_meets_promise("c0", list(range(2, 72)), 0, 0, stored, "whole-blocks", 32) is None  # other prompt
    assert claim_meets_promise("c0", list(range(1, 71)), 0, 0, stored, None, 32) is None
    assert claim_meets_promise("c0", list(range(1, 71)), 0, None, stored, "whole-blocks", 32) is None  # ask again
