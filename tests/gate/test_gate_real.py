"""``kvconform gate --run`` with the real suite: a reverted device fix, a harmless change, a connector that cannot
run here, and a base that already fails.

Each run imports the checkout's vLLM through the gate's overlay and drives the
real connectors (each run is a suite run), so there are four, restricted
with ``-k`` to the plain round-trip where a round-trip is what the change risks.
The checkout is the installed vLLM's Python sources in git (``vllm_checkout``): a
change to it is exactly what runs.
"""

from __future__ import annotations

import importlib.util

import pytest

from kvconform.pipelines.gate import overlay
from tests.gate.vllm_checkout import (
    COMMENTED,
    CONNECTORS,
    EXAMPLE,
    FIXED,
    REVERTED,
    ROUNDTRIP_ONLY,
    change_example,
)
from tests.load import stretched

LMCACHE = f"{CONNECTORS}/v1/lmcache_connector.py"

pytestmark = pytest.mark.timeout(stretched(1200))


def gate_run(gate, repo, head, *extra):
    return gate("--repo", str(repo.path), "--base", repo.base, "--head", head, "--run", "--platform=cpu", *extra)


def test_reverting_the_fix_of_pr_51806_fails_naming_the_device(gate, vllm_repo):
    source = vllm_repo.text(EXAMPLE)
    assert source.count(FIXED) == 1  # the installed vLLM has the fix: the change below really reverts it
    head = vllm_repo.commit({EXAMPLE: source.replace(FIXED, REVERTED)}, message="revert #51806")
    result = gate_run(gate, vllm_repo, head, "-k", ROUNDTRIP_ONLY)
    assert result.status == 1, result.out[-3000:]
    assert "kvconform gate: FAIL on cpu" in result.out and f"tested checkout {head[:12]}" in result.out
    failed = [line for line in result.out.splitlines() if line.strip().startswith("FAILED ")]
    assert failed and all("the KV cache is on cpu but the connector moved or created a tensor on cuda" in line
                          for line in failed), result.out[-3000:]
    assert {"ExampleConnector", "MultiConnector"} <= {name for line in failed
                                                       for name in ("ExampleConnector", "MultiConnector")
                                                       if f"-{name}-" in line}
    assert "PASS" not in result.out


def test_a_harmless_change_to_the_same_file_passes(gate, vllm_repo):
    head = change_example(vllm_repo, COMMENTED)
    result = gate_run(gate, vllm_repo, head, "-k", ROUNDTRIP_ONLY)
    assert result.status == 0, result.out[-3000:]
    assert (f"kvconform gate: PASS: ExampleConnector, MultiConnector on cpu (tested checkout {head[:12]} "
            "over the compiled parts of the installed vllm") in result.out
    # the selection, a line per connector and the verdict; pytest's own output is in the log the gate names
    assert len(result.out.splitlines()) < 100 and result.err == "", result.out[-3000:]


def test_a_connector_that_cannot_run_here_is_not_exercised(gate, vllm_repo):
    if importlib.util.find_spec("lmcache") is not None:
        pytest.skip("lmcache is installed here, so LMCacheConnectorV1 can run: "
                    "this test needs an environment without it")
    head = vllm_repo.touch(LMCACHE)
    result = gate_run(gate, vllm_repo, head)
    assert result.status == 3, result.out[-3000:]
    assert "kvconform gate: LMCacheConnectorV1: not exercised on cpu: only lint ran (no runtime check)" in result.out
    assert "lmcache" in result.out.split("not exercised on cpu:", 1)[1].splitlines()[0]
    assert "run it there: kvconform gate --repo" in result.out and "PASS" not in result.out


def test_a_comment_over_a_base_that_fails_is_not_blamed_for_the_base(gate, vllm_repo):
    """The base (main, ahead of the installed build) already fails the round-trip; the head adds a comment.

    The failed tests run again over the base, named by their real ids (``-k``); had that named none of them, or
    other ids, they would not fail there and would count against the change (exit 1).
    """
    base = vllm_repo.commit({EXAMPLE: vllm_repo.text(EXAMPLE).replace(FIXED, REVERTED)}, message="main: broken")
    head = vllm_repo.commit({EXAMPLE: vllm_repo.text(EXAMPLE) + "\n# a comment\n"})
    result = gate("--repo", str(vllm_repo.path), "--base", base, "--head", head, "--run", "--platform=cpu",
                  "-k", f"{ROUNDTRIP_ONLY} and float32")
    assert result.status == 4, result.out[-3000:]
    build = overlay.installed_build()
    verdict = (f"kvconform gate: this checkout does not run over the installed build {build.distribution} "
               f"{build.version} ({build.package_dir}): 1 file(s) of its base {base[:12]} differ from it; "
               "2 selected test(s) fail on the base too")
    assert verdict in result.out.splitlines(), result.out[-3000:]
    listed = result.out.split(verdict + "\n", 1)[1].splitlines()[:2]
    assert all(line.startswith("  FAILED ") and "moved or created a tensor on cuda" in line for line in listed)
    assert {"ExampleConnector", "MultiConnector"} == {name for line in listed
                                                      for name in ("ExampleConnector", "MultiConnector")
                                                      if f"-{name}-" in line}
    assert "FAIL on cpu" not in result.out and "PASS" not in result.out
