"""The workload's resumed-chunked scenario fails an ExampleConnector whose resumed loads take the wrong tokens, and
passes the unmodified one.

``ResumedProductConnector`` (tests/checks/example_resume_broken.py) keys a resumed request's load on
``num_computed_tokens * num_new_tokens`` tokens, the survivor the mutation floor recorded. Where a resumed load
schedules the rest of its request (``resumed-beside-running``) the product slices the same tokens and the copy
passes; where it schedules part of them after its generated tokens crossed a block boundary (``resumed-chunked``) the
copy's load looks in a folder nothing stored. One shared run covers both scenarios for the copy and the new one for
ExampleConnector.
"""

from __future__ import annotations

from tests.shared_run.plan import SelfTestRun, results_of
from tests.suite_run import REPO, of_connector

PROFILES = REPO / "tests" / "checks" / "example_resume_broken.yaml"
COPY = "ResumedProductConnector"
# the words of the copy's failure: the engine and step, the crash, and the resumed request it was loading
WORDS = [f"{COPY}: consumer engine, step", "FileNotFoundError raised while stepping",
         "requests loading external KV: c2 (32 external tokens claimed, resumed after preemption)"]

RUN = SelfTestRun.of_broken(f"test_workload_scenario and (resumed-chunked or ({COPY} and resumed-beside-running))",
                           "ExampleConnector", "tests.checks.example_resume_broken", [COPY], profiles=[PROFILES])


resume_run = results_of(RUN)


def _scenario(outcomes, name: str, scenario: str):
    return [o for o in of_connector(outcomes, name) if o.nodeid.endswith(f"-{scenario}]")]


def test_unmodified_example_connector_passes_a_chunked_resume(resume_run):
    _, outcomes, output = resume_run
    mine = _scenario(outcomes, "ExampleConnector", "resumed-chunked")
    assert [o.outcome for o in mine] == ["passed"], (output[-3000:], [o.message[:1500] for o in mine])


def test_copy_fails_the_chunked_resume_naming_the_request(resume_run):
    _, outcomes, output = resume_run
    mine = _scenario(outcomes, COPY, "resumed-chunked")
    assert [o.outcome for o in mine] == ["failed"], output[-3000:]
    for words in WORDS:
        assert words in mine[0].message, (words, mine[0].message[:1500])


def test_copy_passes_a_resume_that_schedules_all_its_tokens(resume_run):
    """What the suite ran before: the product slices the same tokens, so only the new scenario tells them apart."""
    _, outcomes, output = resume_run
    mine = _scenario(outcomes, COPY, "resumed-beside-running")
    assert [o.outcome for o in mine] == ["passed"], (output[-3000:], [o.message[:1500] for o in mine])
