"""Buildkite steps, built from one lane (or the report settings) at a time.

The vocabulary is vLLM CI's: label with the platform's emoji, key, depends_on,
agents, env, plugins, timeout_in_minutes, retry, soft_fail, parallelism,
artifact_paths. Each test step writes one JUnit file per job into
``reports/out/junit/<platform>/`` (beside the report, in the folder git ignores)
and uploads exactly that file, so the report step can fetch one platform's
results without another platform's or a stale run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipelines.lanes import Lane, LanesConfig, RetryRule, RunSpec
from pipelines.shell import Raw, Word, for_upload, join, wrap
from platforms import PLATFORMS
from platforms.spec import PlatformSpec

KEY_PREFIX = "kvconform"
JUNIT_ROOT = "reports/out/junit"
REPORT_OUT = "reports/out"
# A wrapper that starts a container is told which variables to pass in (pipelines/wrappers/in-container.sh).
FORWARD_ENV = "KVCONFORM_FORWARD_ENV"


@dataclass(frozen=True)
class LaneRun:
    """One lane of the pipeline, with its settings resolved against the defaults."""

    name: str
    lane: Lane
    spec: PlatformSpec
    timeout_in_minutes: int
    retry: list[RetryRule]

    @classmethod
    def of(cls, config: LanesConfig, name: str) -> "LaneRun":
        lane = config.lanes[name]
        return cls(name, lane, PLATFORMS[lane.platform], config.timeout_of(lane), config.retry_of(lane))

    def junit_dir(self) -> str:
        return f"{JUNIT_ROOT}/{self.spec.name}"

    def label(self, detail: str | None = None) -> str:
        text = f"{self.spec.emoji} {self.name}" + (f": {detail}" if detail else "")
        if self.lane.devices > 1:
            text += f" ({self.lane.devices} devices)"
        return text + (" [experimental]" if self.lane.experimental else "")


def _env(run: RunSpec, also_forward: tuple[str, ...] = ()) -> dict[str, str]:
    env = dict(run.env)
    forwarded = sorted(set(run.env) | set(also_forward))
    if run.wrapper is not None and forwarded:
        env[FORWARD_ENV] = " ".join(forwarded)
    return env


def _placement(run: RunSpec, timeout: int, retry: list[RetryRule], forward: tuple[str, ...] = ()) -> dict[str, Any]:
    """Where and how long a step runs, in Buildkite's spelling; empty settings are left out."""
    step: dict[str, Any] = {"agents": dict(run.agents)}
    env = _env(run, forward)
    if env:
        step["env"] = env
    if run.plugins:
        step["plugins"] = list(run.plugins)
    step["timeout_in_minutes"] = timeout
    if retry:
        step["retry"] = {"automatic": [rule.to_buildkite() for rule in retry]}
    return step


def pytest_words(run: LaneRun, connectors: list[str], junit: str) -> list[Word]:
    """The conformance run of ``connectors`` on the lane's platform; ``--opt=value`` so no value reads as an option."""
    words: list[Word] = ["pytest", "conformance", f"--platform={run.spec.name}"]
    words += [f"--connector={name}" for name in connectors]
    words += [f"--attn-backend={backend}" for backend in run.lane.attn_backends]
    # always under xdist: a worker that a connector crashes is replaced and its test fails, naming it
    words += ["-n", str(run.lane.xdist_workers), "--max-worker-restart=16"]
    return [*words, "-rs", f"--junitxml={junit}"]


def _test_step(run: LaneRun, key: str, label: str) -> dict[str, Any]:
    step: dict[str, Any] = {"label": label, "key": key}
    if run.lane.depends_on:
        step["depends_on"] = list(run.lane.depends_on)
    step.update(_placement(run.lane, run.timeout_in_minutes, run.retry, run.spec.visibility_vars))
    if run.lane.soft_fail not in (False, []):
        step["soft_fail"] = (True if run.lane.soft_fail is True
                             else [{"exit_status": status} for status in run.lane.soft_fail])
    return step


def group_step(run: LaneRun, group: str | None, connectors: list[str]) -> dict[str, Any]:
    """One job running ``connectors`` (a connector group, or a whole lane when ``group`` is None)."""
    key = f"{KEY_PREFIX}-test-{run.name}" + (f"-{group}" if group else "")
    junit = f"{run.junit_dir()}/{key}.xml"
    step = _test_step(run, key, run.label(group))
    step["commands"] = [for_upload(join(["rm", "-f", "--", junit])),
                        for_upload(wrap(pytest_words(run, connectors, junit), run.lane.wrapper))]
    step["artifact_paths"] = [junit]
    return step


def sharded_step(run: LaneRun, connectors: list[str]) -> dict[str, Any]:
    """One step of ``parallelism`` jobs; job i runs the connectors dealt to it (i, i+n, i+2n, ...)."""
    jobs = min(run.lane.parallelism or 1, len(connectors))
    if jobs <= 1:
        return group_step(run, None, connectors)
    key = f"{KEY_PREFIX}-test-{run.name}"
    junits = [f"{run.junit_dir()}/{key}-{job}.xml" for job in range(jobs)]
    step = _test_step(run, key, run.label())
    step["parallelism"] = jobs
    branches = [f"{job}) " + wrap(pytest_words(run, connectors[job::jobs], junits[job]), run.lane.wrapper) + " ;;"
                for job in range(jobs)]
    job_index = Raw('"$BUILDKITE_PARALLEL_JOB"')
    no_shard = join(["echo", f"kvconform: {key} has {jobs} jobs; no connectors for job", job_index])
    step["commands"] = [for_upload(line) for line in (
        join(["rm", "-f", "--", *junits]),
        f"case {job_index.text} in",
        *branches,
        f"*) {no_shard} >&2; exit 2 ;;",
        "esac",
    )]
    step["artifact_paths"] = junits
    return step


def platform_group(spec: PlatformSpec, steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"group": f"{spec.emoji} {spec.name} conformance", "key": f"{KEY_PREFIX}-{spec.name}", "steps": steps}


def wait_step() -> dict[str, Any]:
    """Wait for every test step, passed or failed, so the report always runs."""
    return {"wait": None, "continue_on_failure": True}


def report_step(config: LanesConfig, platforms: list[str], test_keys: list[str]) -> dict[str, Any]:
    """Fetch the platforms' JUnit files, render them with ``kvconform report``, annotate the build.

    ``kvconform report`` exits non-zero only when it cannot write the report, so the
    annotation's style comes from Buildkite's own outcome of each test step: error
    if any failed or never finished (a crash that wrote no JUnit counts too), warning
    if one soft-failed, else success. The step fails only if the report does.
    """
    suffix = "-".join(platforms)
    junit_dirs = [f"{JUNIT_ROOT}/{platform}" for platform in platforms]
    report = wrap(["kvconform", "report", *[Raw(join([d]) + "/*.xml") for d in junit_dirs], "--out", REPORT_OUT],
                  config.report.wrapper)
    annotate = join(["buildkite-agent", "annotate", "--style", Raw('"$style"'), "--context", f"{KEY_PREFIX}-{suffix}"])
    lines = [
        join(["rm", "-rf", "--", REPORT_OUT]),
        *[join(["buildkite-agent", "artifact", "download", f"{d}/*.xml", "."]) for d in junit_dirs],
        "style=success",
        f"for key in {join(test_keys)}; do",
        '  case "$(buildkite-agent step get outcome --step "$key")" in',
        "    passed) ;;",
        '    soft_failed) if [ "$style" = success ]; then style=warning; fi ;;',
        "    *) style=error ;;",
        "  esac",
        "done",
        report,
        f"{annotate} < {join([REPORT_OUT + '/summary.md'])}",
    ]
    step: dict[str, Any] = {"label": ":memo: kvconform report", "key": f"{KEY_PREFIX}-report-{suffix}"}
    step.update(_placement(config.report, config.timeout_of(config.report), config.retry_of(None)))
    step["commands"] = [for_upload(line) for line in lines]
    return step
