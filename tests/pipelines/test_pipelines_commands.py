"""Generated commands, executed: hostile names reach pytest as data and never as shell.

Each test builds steps, simulates ``pipeline upload`` (``$$`` -> ``$``, and any other
``$`` is a failure), runs the commands with ``bash -e -c`` against recording fakes,
and checks the exact argv each program received.
"""

from __future__ import annotations

import argparse
import shlex

import pytest
from pipeline_testkit import WHEEL_FETCH

from kvconform.pipelines.install import ensure_line
from kvconform.pipelines.lanes import Container, Lane, LanesConfig, RunSpec, Wrapper
from kvconform.pipelines.shell import Raw, join, wrap
from kvconform.pipelines.steps import FORWARD_ENV, LaneRun, group_step, report_step, sharded_step
from kvconform.platforms import PLATFORMS

HOSTILE = [
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned",
    "x; rm -rf /",
    "a\ntouch pwned",
    "-rf",
    "--junitxml=/tmp/evil.xml",
    "$HOME",
    "${PATH}",
    "$$",
    "it's \"quoted\"",
    "* ?",
    "&& touch pwned &",
    "|| true",
]


def lane_run(wrapper: Wrapper | None = None, **fields) -> LaneRun:
    lane = Lane(platform="xpu", agents={"queue": "q"}, wrapper=wrapper, **fields)
    return LaneRun("xpu", lane, PLATFORMS["xpu"], 5, [])


def expected_pytest(connectors: list[str], junit: str, workers: int = 1) -> list[str]:
    return ["--pyargs", "kvconform.conformance", "--platform=xpu", *[f"--connector={c}" for c in connectors],
            "-n", str(workers), "--max-worker-restart=16", "-rs", f"--junitxml={junit}"]


def assert_nothing_injected(fake_bin, allowed=("pytest", "rm", "wrap", "python3", "buildkite-agent")):
    assert not list(fake_bin.cwd.rglob("pwned")), "a hostile name ran as shell"
    assert {call["prog"] for call in fake_bin.calls()} <= set(allowed), fake_bin.calls()
    # besides the tests, only kvconform's own install: fetch its wheel, see whether it imports
    assert [c["argv"] for c in fake_bin.calls("buildkite-agent")] == [[*WHEEL_FETCH, "."]]
    assert [c["argv"] for c in fake_bin.calls("python3")] == [["-P", "-c", "import kvconform"]]
    for call in fake_bin.calls("rm"):
        assert call["argv"][:2] == ["-f", "--"] and all(a.startswith("reports/out/junit/") for a in call["argv"][2:])


@pytest.mark.parametrize("mode", [None, "arguments", "string"])
def test_group_step_passes_hostile_connector_names_as_data(mode, fake_bin):
    wrapper = None if mode is None else Wrapper(argv=[fake_bin.wrap, "--opt=$(touch pwned) `x`", "--"], command_as=mode)
    step = group_step(lane_run(wrapper), "g", HOSTILE)
    result = fake_bin.run_commands(step["commands"], FAKE_WRAP_MODE=mode or "")
    assert result.returncode == 0, result.stderr

    junit = "reports/out/junit/xpu/kvconform-test-xpu-g.xml"
    [pytest_call] = fake_bin.calls("pytest")
    assert pytest_call["argv"] == expected_pytest(HOSTILE, junit)
    assert step["artifact_paths"] == [junit]
    if mode is not None:
        [wrap_call] = fake_bin.calls("wrap")
        assert wrap_call["argv"][:2] == ["--opt=$(touch pwned) `x`", "--"]
    assert_nothing_injected(fake_bin)


def test_connector_values_starting_with_dashes_stay_values():
    """``--connector=-rf`` binds -rf to --connector; a separate word would read as an option."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--connector", action="append")
    parser.add_argument("--junitxml")
    words = shlex.split(group_step(lane_run(), "g", ["-rf", "--junitxml=/tmp/evil.xml"])["commands"][-1])
    args, _ = parser.parse_known_args(words[2:])
    assert args.connector == ["-rf", "--junitxml=/tmp/evil.xml"]
    assert args.junitxml == "reports/out/junit/xpu/kvconform-test-xpu-g.xml"


@pytest.mark.parametrize("jobs", [2, 3])
def test_sharded_step_gives_each_job_its_deal_of_connectors(jobs, fake_bin):
    run = lane_run(parallelism=jobs, xdist_workers=2)
    step = sharded_step(run, HOSTILE)
    assert step["parallelism"] == jobs
    seen = []
    for job in range(jobs):
        fake_bin.log.unlink(missing_ok=True)
        result = fake_bin.run_commands(step["commands"], BUILDKITE_PARALLEL_JOB=str(job))
        assert result.returncode == 0, result.stderr
        [call] = fake_bin.calls("pytest")
        junit = f"reports/out/junit/xpu/kvconform-test-xpu-{job}.xml"
        assert call["argv"] == expected_pytest(HOSTILE[job::jobs], junit, workers=2)
        assert junit in step["artifact_paths"]
        assert_nothing_injected(fake_bin)
        seen += HOSTILE[job::jobs]
    assert sorted(seen) == sorted(HOSTILE)


def test_sharded_job_without_connectors_fails_loudly(fake_bin):
    step = sharded_step(lane_run(parallelism=2), ["ExampleConnector", "MultiConnector"])
    result = fake_bin.run_commands(step["commands"], BUILDKITE_PARALLEL_JOB="2")
    assert result.returncode == 2
    assert "no connectors for job 2" in result.stderr
    assert fake_bin.calls("pytest") == []


def test_sharding_one_connector_is_a_plain_step():
    step = sharded_step(lane_run(parallelism=4), ["ExampleConnector"])
    assert "parallelism" not in step and step["key"] == "kvconform-test-xpu"


def _report_config(wrapper: Wrapper | None = None) -> LanesConfig:
    return LanesConfig(connector_groups={"g": ["ExampleConnector"]},
                       lanes={"xpu": Lane(platform="xpu", agents={"queue": "q"})},
                       report=RunSpec(agents={"queue": "cpu"}, wrapper=wrapper))


def _report_checkout(fake_bin) -> None:
    for name in ("reports/out/junit/xpu/a.xml", "reports/out/junit/xpu/b.xml", "reports/out/junit/cpu/c.xml"):
        (fake_bin.cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (fake_bin.cwd / name).write_text("<testsuites/>")
    (fake_bin.cwd / "reports/out").mkdir(parents=True, exist_ok=True)
    (fake_bin.cwd / "reports/out/summary.md").write_text("## kvconform: 3 passed\n")


@pytest.mark.parametrize("outcomes, style", [
    ({"t-a": "passed", "t-b": "passed"}, "success"),
    ({"t-a": "passed", "t-b": "soft_failed"}, "warning"),
    ({"t-a": "soft_failed", "t-b": "hard_failed"}, "error"),
    ({"t-a": "errored", "t-b": "passed"}, "error"),
    ({"t-a": "passed"}, "error"),  # a step with no outcome never finished
])
@pytest.mark.parametrize("mode", [None, "string"])
def test_report_step_annotates_in_the_style_of_the_test_steps_outcomes(outcomes, style, mode, fake_bin):
    wrapper = None if mode is None else Wrapper(argv=[fake_bin.wrap, "--"], command_as=mode)
    step = report_step(_report_config(wrapper), ["xpu", "cpu"], ["t-a", "t-b"])
    _report_checkout(fake_bin)
    fake_bin.set_outcomes(outcomes)

    result = fake_bin.run_commands(step["commands"], FAKE_WRAP_MODE=mode or "")
    assert result.returncode == 0, result.stderr
    agent_calls = fake_bin.agent_calls()
    assert agent_calls[:2] == [["artifact", "download", "reports/out/junit/xpu/*.xml", "."],
                               ["artifact", "download", "reports/out/junit/cpu/*.xml", "."]]
    assert agent_calls[2:4] == [["step", "get", "outcome", "--step", "t-a"],
                                ["step", "get", "outcome", "--step", "t-b"]]
    [report] = fake_bin.calls("kvconform")
    assert report["argv"] == ["report", "reports/out/junit/cpu/c.xml", "reports/out/junit/xpu/a.xml",
                              "reports/out/junit/xpu/b.xml", "--out", "reports/out", "--exit-zero"]
    assert agent_calls[4:] == [["annotate", "--style", style, "--context", "kvconform-xpu-cpu"]]
    assert fake_bin.annotation() == "## kvconform: 3 passed\n"


@pytest.mark.parametrize("missing", [["cpu"], ["xpu", "cpu"]])
def test_report_step_annotates_naming_a_platform_that_uploaded_no_junit(missing, fake_bin):
    step = report_step(_report_config(), ["xpu", "cpu"], ["t-a", "t-b"])
    _report_checkout(fake_bin)
    for platform in missing:  # as if the download found nothing to fetch
        for junit in (fake_bin.cwd / "reports/out/junit" / platform).glob("*.xml"):
            junit.unlink()
    fake_bin.set_outcomes({"t-a": "passed", "t-b": "passed"})
    recorder = fake_bin.dir / "buildkite-agent"
    recorder.write_text(recorder.read_text().replace(
        'status_var=', f'case "$*" in *junit/{missing[0]}/*|*junit/{missing[-1]}/*) exit 1 ;; esac\nstatus_var='))

    result = fake_bin.run_commands(step["commands"])
    assert result.returncode == 0, result.stderr
    annotate = [argv for argv in fake_bin.agent_calls() if argv[0] == "annotate"]
    assert annotate == [["annotate", "--style", "error", "--context", "kvconform-xpu-cpu"]]
    assert f"no JUnit results from: {' '.join(missing)}**" in fake_bin.annotation()
    if missing == ["cpu"]:
        [report] = fake_bin.calls("kvconform")
        assert report["argv"][1:3] == ["reports/out/junit/xpu/a.xml", "reports/out/junit/xpu/b.xml"]
    else:
        assert fake_bin.calls("kvconform") == []


def test_report_step_fails_without_annotating_when_the_report_fails(fake_bin):
    step = report_step(_report_config(), ["xpu"], ["t-a"])
    _report_checkout(fake_bin)
    fake_bin.set_outcomes({"t-a": "passed"})
    result = fake_bin.run_commands(step["commands"], FAKE_KVCONFORM_STATUS="2")
    assert result.returncode == 2
    assert not [c for c in fake_bin.calls("buildkite-agent") if c["argv"][0] == "annotate"]


def test_wrapped_steps_name_the_env_to_forward():
    step = group_step(lane_run(Wrapper(argv=["w", "--"]), env={"ZE_AFFINITY_MASK": "0", "B": "x"}), "g", ["X"])
    assert step["env"][FORWARD_ENV] == "B ZE_AFFINITY_MASK"
    assert FORWARD_ENV not in (group_step(lane_run(env={"B": "x"}), "g", ["X"]).get("env") or {})


def test_join_quotes_data_and_keeps_raw_syntax():
    assert join(["a b", Raw("*.xml"), "$x"]) == "'a b' *.xml '$x'"
    assert wrap(["pytest", "a b"], Wrapper(argv=["w", "--"], command_as="string")) == "w -- 'pytest '\"'\"'a b'\"'\"''"


# ---- the XPU/ROCm container, written into the step ---------------------------------------------


def container_run(**fields) -> LaneRun:
    container = Container(image="img:1", options=["--device", "/dev/dri", "--shm-size", "16g"])
    lane = Lane(platform="xpu", agents={"queue": "q"}, container=container, **fields)
    return LaneRun("xpu", lane, PLATFORMS["xpu"], 5, [])


def test_a_container_lane_runs_pytest_in_the_image_with_the_lane_env(fake_bin):
    step = group_step(container_run(env={"B": "x"}), "g", HOSTILE)
    assert step["env"] == {"B": "x", "KVCONFORM_IMAGE": "img:1"}
    result = fake_bin.run_commands(step["commands"], **step["env"])
    assert result.returncode == 0, result.stderr
    [docker] = fake_bin.calls("docker")
    cwd = str(fake_bin.cwd)
    junit = "reports/out/junit/xpu/kvconform-test-xpu-g.xml"
    assert docker["argv"][:-3] == ["run", "--rm", "--init", "--volume", f"{cwd}:{cwd}", "--workdir", cwd,
                                   "--env=B", "--env=ZE_AFFINITY_MASK", "--device", "/dev/dri", "--shm-size", "16g",
                                   "img:1"]
    # in the image: kvconform ensured (installed from the fetched wheel if missing), then the tests
    assert docker["argv"][-3:-1] == ["sh", "-c"]
    ensure, _, run = docker["argv"][-1].partition(" && exec ")
    assert ensure == ensure_line()
    assert shlex.split(run) == ["env", "PYTHONSAFEPATH=1", "python3", "-P", "-m", "pytest",
                                *expected_pytest(HOSTILE, junit)]
    assert not list(fake_bin.cwd.rglob("pwned"))


def test_a_container_step_fails_with_the_commands_exit_status(fake_bin):
    step = group_step(container_run(), "g", ["ExampleConnector"])
    result = fake_bin.run_commands(step["commands"], FAKE_DOCKER_STATUS="7", **step["env"])
    assert result.returncode == 7


def test_shipped_steps_call_nothing_from_a_kvconform_checkout():
    """Steps run in a vLLM pull request's checkout: no script path of ours, and the suite by package name."""
    from kvconform.pipelines.generate import build_pipeline

    pipeline = build_pipeline(["all"])
    commands = [command for step in pipeline["steps"] for inner in step.get("steps", [step])
                for command in inner.get("commands", [])]
    assert commands and not [c for c in commands if "pipelines/" in c or "wrappers" in c]
    runs = [c for c in commands if "pytest" in c]
    assert runs and all("python3 -P -m pytest --pyargs kvconform.conformance " in c for c in runs)


def test_a_lane_gives_a_container_or_a_wrapper_not_both():
    with pytest.raises(ValueError, match="a wrapper or a container, not both"):
        Lane(platform="xpu", agents={"queue": "q"}, wrapper=Wrapper(argv=["w"]), container=Container(image="i"))
