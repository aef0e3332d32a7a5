"""Workload specs: a printed spec replays the same workload; a bad one is one clear error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from kvconform.conformance.workload.scenarios import WORKLOAD_SCENARIOS
from kvconform.conformance.workload.spec import RequestSpec, SpecError, WorkloadSpec
from kvconform.conformance.workload.strategies import CHUNKED_MIN_PROMPT, workload_specs


@pytest.mark.parametrize("name", list(WORKLOAD_SCENARIOS))
def test_scenario_spec_replays_exactly(name):
    spec = WORKLOAD_SCENARIOS[name]
    again = WorkloadSpec.from_text(spec.to_text())
    assert again == spec
    assert [r.prompt() for r in again.consumer] == [r.prompt() for r in spec.consumer]


def test_prompts_share_the_stem_and_diverge_after_it():
    a, b = RequestSpec(family=1, shared=40, length=70, tail=1), RequestSpec(family=1, shared=40, length=70, tail=2)
    assert a.prompt()[:40] == b.prompt()[:40] and a.prompt()[40] != b.prompt()[40]
    longer = RequestSpec(family=1, shared=40, length=90, tail=1)
    assert longer.prompt()[:70] == a.prompt()  # an extension keeps the prompt it extends


def test_peer_requests_print_only_when_present_and_replay():
    plain = WorkloadSpec(producer=(RequestSpec(length=40),), consumer=(RequestSpec(length=40),))
    assert '"peer"' not in plain.to_text()
    with_peer = WorkloadSpec(producer=plain.producer, consumer=plain.consumer, peer=(RequestSpec(family=3, length=50),))
    assert WorkloadSpec.from_text(with_peer.to_text()) == with_peer
    assert list(with_peer.requests("peer")) == ["x0"] and list(with_peer.requests("consumer")) == ["c0"]


@pytest.mark.parametrize("text, words", [
    ("not json", "one line of JSON"),
    ("[1]", "a JSON object"),
    ('{"nblocks": 3}', "unknown workload field(s) nblocks"),
    ('{"consumer": [{"lenght": 3}]}', "consumer[0]: unknown field(s) lenght"),
    ('{"consumer": [{"length": 10, "shared": 11}]}', "consumer[0]: need 0 <= shared <= length"),
    ('{"token_budget": 4, "max_seqs": 16}', "token_budget (4) must be at least max_seqs (16)"),
    ('{"num_blocks": 0}', "num_blocks must be a positive integer"),
])
def test_bad_spec_is_one_clear_error(text, words):
    with pytest.raises(SpecError) as raised:
        WorkloadSpec.from_text(text)
    assert words in str(raised.value) and "\n" not in str(raised.value)


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(spec=workload_specs(chunked=True))
def test_generated_chunked_specs_are_valid_and_chunked(spec):
    spec.validate()
    assert WorkloadSpec.from_text(spec.to_text()) == spec
    assert spec.producer[0].length >= CHUNKED_MIN_PROMPT > spec.token_budget
    longest = max(-(-(r.length + r.max_tokens) // spec.block_size) for r in spec.producer + spec.peer + spec.consumer)
    assert spec.num_blocks >= longest + 2  # the longest request always fits: stuck means a bug


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(spec=workload_specs(chunked=False))
def test_generated_whole_specs_fit_one_step(spec):
    assert all(r.length <= spec.token_budget for r in spec.producer + spec.peer + spec.consumer)
