"""Without xdist: a hang times out naming the connector, leaked threads cannot keep pytest alive, and the
load-failure check tells honest answers from silent corruption.

One suite run of ``test_load_failure`` (both policies for the connectors whose
answer depends on vLLM's truncation, the default ``fail`` policy for the rest):

- ``HangingSaveConnector`` sleeps forever in ``wait_for_save``: one timeout, the rest not run;
- ``LeakyThreadConnector`` leaves non-daemon threads: pytest still exits, with the run's status;
- ``ReportingLoadConnector`` (reports what it could not verify) must pass every sabotage;
- ``SilentLoadFailureConnector`` (swallows errors) and ``LastBlockOnlyReportConnector``
  (reports too little) must fail, naming the wrong slot;
- ExampleConnector's own answers are recorded: it raises on missing or truncated files.
"""

from __future__ import annotations

import pytest

from tests.load import stretched
from tests.reliability.suite import misbehaving, shared_run

TIMEOUT_S = 5  # per test on a quiet machine; stretched by the load as the run starts (tests/load.py)
TESTS = ("test_load_failure and (not recompute or ReportingLoadConnector or LastBlockOnlyReportConnector "
         "or SilentLoadFailureConnector)")
SABOTAGES = ("deleted", "truncated", "garbled")


def _plan(folder):
    """The per-test timeout is chosen here, once, and kept beside the run: xdist workers import this module apart."""
    timeout = stretched(TIMEOUT_S)
    (folder / "timeout_s").write_text(str(timeout))
    args = ["-k", TESTS, f"--kvconform-timeout={timeout}", f"--basetemp={folder / 'basetemp'}",
            "--connector", "ExampleConnector",
            *misbehaving("ReportingLoadConnector", "SilentLoadFailureConnector", "LastBlockOnlyReportConnector",
                         "HangingSaveConnector", "LeakyThreadConnector")]
    return args, {}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    return shared_run(tmp_path_factory, "hang-and-load-failure", _plan)


@pytest.fixture
def load_run(shared):
    return shared[0]


@pytest.fixture
def run_dir(shared):
    return shared[1]


def _case(run, connector, sabotage, policy="fail"):
    [case] = [c for c in run.of(connector) if c.nodeid.endswith(f"-{sabotage}-{policy}]")]
    return case


def test_the_run_ends_with_its_status_despite_leaked_non_daemon_threads(load_run):
    assert load_run.returncode == 1, load_run.output[-3000:]
    assert "non-daemon thread(s) still running at exit ('leaky-kv-poller' (non-daemon)" in load_run.output
    assert "exiting with status 1 without waiting for them" in load_run.output


def test_a_hang_is_one_timeout_naming_the_connector_and_the_rest_not_run(load_run, run_dir):
    mine = load_run.of("HangingSaveConnector")
    timed_out = [c for c in mine if c.outcome == "failed"]
    assert len(mine) == 3 and len(timed_out) == 1, [(c.nodeid, c.outcome) for c in mine]
    timeout = (run_dir / "timeout_s").read_text()
    assert f"HangingSaveConnector did not finish the test's call within {timeout} s" in timed_out[0].message
    assert "wait_for_save" in timed_out[0].message  # the traceback shows where it hung
    for case in mine:
        if case is not timed_out[0]:
            assert case.outcome == "error"
            assert "not run: HangingSaveConnector timed out earlier in " in case.message
            assert timed_out[0].nodeid.split("::")[-1] in case.message


def test_passed_tests_leave_no_temporary_folder_and_failed_ones_keep_theirs(load_run, run_dir):
    kept = [p for p in (run_dir / "basetemp").iterdir()
            if p.name.startswith("test_load_failure") and not p.is_symlink()]
    reached_fixtures = [c for c in load_run.cases if "not run:" not in c.message]
    not_passed = [c for c in reached_fixtures if c.outcome != "passed"]
    assert 0 < len(not_passed) < len(reached_fixtures)
    assert len(kept) == len(not_passed), (sorted(p.name for p in kept), [c.nodeid for c in not_passed])
    assert all((p / "kv-storage").is_dir() for p in kept)  # what the failed test's connector stored, for a look


@pytest.mark.parametrize("policy", ["fail", "recompute"])
@pytest.mark.parametrize("sabotage", SABOTAGES)
def test_a_connector_that_reports_what_it_could_not_load_passes(load_run, sabotage, policy):
    case = _case(load_run, "ReportingLoadConnector", sabotage, policy)
    assert case.outcome == "passed", case.message[:2000]
    assert case.properties["kvconform.load_failure_answer"].startswith("reported block(s) [")


@pytest.mark.parametrize("policy", ["fail", "recompute"])
@pytest.mark.parametrize("sabotage", SABOTAGES)
def test_a_connector_that_swallows_the_failure_fails(load_run, sabotage, policy):
    case = _case(load_run, "SilentLoadFailureConnector", sabotage, policy)
    assert case.outcome == "failed"
    assert "SilentLoadFailureConnector: after the consumer was scheduled" in case.message
    assert "neither raised nor reported a load error" in case.message
    assert "holds bytes the producer never saved" in case.message and f"({policy} policy)" in case.message


@pytest.mark.parametrize("policy", ["fail", "recompute"])
@pytest.mark.parametrize("sabotage", ["deleted", "truncated"])
def test_reporting_too_few_blocks_fails_on_the_blocks_vllm_keeps(load_run, sabotage, policy):
    case = _case(load_run, "LastBlockOnlyReportConnector", sabotage, policy)
    assert case.outcome == "failed", case.message[:2000]
    assert "reported block(s) [" in case.message and "holds bytes the producer never saved" in case.message
    assert "harness:" not in case.message  # vLLM's own rescheduling agreed with the check's model


@pytest.mark.parametrize("sabotage,answer", [("deleted", "raised FileNotFoundError"),
                                             ("truncated", "raised SafetensorError")])
def test_example_connector_raises_on_missing_or_truncated_data(load_run, sabotage, answer):
    case = _case(load_run, "ExampleConnector", sabotage)
    assert case.outcome == "passed", case.message[:2000]
    assert case.properties["kvconform.load_failure_answer"].startswith(answer)


def test_example_connector_loads_garbled_data_silently(load_run):
    """A real finding: ExampleConnector keeps no digest, so damaged bytes of the right size load as KV."""
    case = _case(load_run, "ExampleConnector", "garbled")
    assert case.outcome == "failed"
    assert "ExampleConnector: after the consumer was scheduled, the second half of every stored file was inverted" \
        in case.message and "neither raised nor reported" in case.message
