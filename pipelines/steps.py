"""Buildkite steps, built from one lane (or the report settings) at a time.

The vocabulary is vLLM CI's: label with the platform's emoji, key, depends_on,
agents, env, plugins, timeout_in_minutes, retry, soft_fail, parallelism,
artifact_paths. Each step starts in a stock vLLM CI image: it fetches and, where the
image lacks it, installs the kvconform that generated it (``pipelines/install.py``)
before it runs the suite, after the step that makes that image when the build makes
it (``pipelines/image_builds.py``). Each test step writes one JUnit file per job into
``reports/out/junit/<platform>/`` (beside the report, in the folder git ignores)
and uploads exactly that file, so the report step can fetch one platform's
results without another platform's or a stale run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvconform.conformance.session.suite_command import SuiteCommand
from kvconform.platforms import PLATFORMS
from kvconform.platforms.spec import PlatformSpec

from . import install
from .image_builds import build_step_of
from .lanes import Lane, LanesConfig, RetryRule, RunSpec
from .shell import Raw, Word, for_upload, join, wrap

KEY_PREFIX = "kvconform"
JUNIT_ROOT = "reports/out/junit"
REPORT_OUT = "reports/out"
# A wrapper that starts a container is told which variables to pass in.
FORWARD_ENV = "KVCONFORM_FORWARD_ENV"
# A lane's container image, in the step's env so pipeline upload fills it in and the command reads it.
IMAGE_ENV = "KVCONFORM_IMAGE"
# The Python of a conformance run, as every step starts it. The suite runs the installed kvconform's checks by
# package name, never a path (a vLLM checkout has no conformance/ folder, and an image with kvconform installed
# beside a source copy would load two). ``-P``: the step's folder is a vLLM checkout, whose own ``vllm/`` must
# not shadow the vLLM built into the image (Python 3.11+, as vLLM's images have); PYTHONSAFEPATH does
# the same for every Python the run starts (xdist workers, vLLM's own model-inspection subprocess,
# which imported the checkout's vllm/ when only -P was given: tests/pipelines/test_pipeline_executed.py).
PYTHON = ("env", "PYTHONSAFEPATH=1", "python3", "-P")


@dataclass(frozen=True)
class LaneRun:
    """One lane of the pipeline, with its settings resolved against the defaults."""

    name: str
    lane: Lane
    spec: PlatformSpec
    timeout_in_minutes: int
    retry: list[RetryRule]
    image_build_step: str | None = None  # the step that makes the lane's image, when this build makes it

    @classmethod
    def of(cls, config: LanesConfig, name: str) -> LaneRun:
        lane = config.lanes[name]
        return cls(name, lane, PLATFORMS[lane.platform], config.timeout_of(lane), config.retry_of(lane),
                   build_step_of(config, lane, lane.platform))

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
    if run.container is not None:
        env[IMAGE_ENV] = run.container.image
    return env


def command_line(words: list[Word], run: RunSpec, also_forward: tuple[str, ...] = ()) -> str:
    """``words`` as the step runs them: as they are, through the lane's wrapper, or in its container.

    The container is ``docker run`` written out: the checkout mounted at the same
    path as the working folder (so the JUnit file lands where artifact_paths looks),
    the step's env and the platform's device-visibility variables passed in.
    """
    if run.container is None:
        return wrap(words, run.wrapper)
    names = sorted(set(run.env) | set(also_forward))
    docker: list[Word] = ["docker", "run", "--rm", "--init", "--volume", Raw('"$PWD:$PWD"'), "--workdir",
                          Raw('"$PWD"'), *[f"--env={name}" for name in names], *run.container.options,
                          Raw(f'"${IMAGE_ENV}"')]
    return join([*docker, *words])


def _in_place(run: RunSpec) -> bool:
    """Whether the step's commands run where its tests run (no container or wrapper of the lane's own)."""
    return run.container is None and run.wrapper is None


def preamble(run: RunSpec) -> list[str]:
    """The lines before a step's own: fetch kvconform's wheel and, when the tests run right here, install it."""
    return [install.fetch_line(), *([install.ensure_line()] if _in_place(run) else [])]


def in_test_env(words: list[Word], run: RunSpec, also_forward: tuple[str, ...] = ()) -> str:
    """``words`` run where the tests run, with kvconform ensured there first.

    In place, ``preamble`` has done that; in a container or through a wrapper the
    check and install run inside it, in one ``sh -c`` that then execs ``words``.
    """
    if _in_place(run):
        return join(words)
    return command_line(["sh", "-c", f"{install.ensure_line()} && exec {join(words)}"], run, also_forward)


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


def suite_words(run: LaneRun, connectors: list[str], junit: str) -> list[Word]:
    """The conformance run of ``connectors`` on the lane's platform (``SuiteCommand``: no value reads as an option).

    Always under xdist: a worker that a connector crashes is replaced and its test fails, naming it.
    """
    command = SuiteCommand(run.spec.name, connectors, python=PYTHON, attn_backends=run.lane.attn_backends,
                           workers=run.lane.xdist_workers, report_skips=True, junitxml=junit)
    return [*command.argv()]


def _test_step(run: LaneRun, key: str, label: str) -> dict[str, Any]:
    step: dict[str, Any] = {"label": label, "key": key}
    depends_on = list(dict.fromkeys([*filter(None, [run.image_build_step]), *run.lane.depends_on]))
    if depends_on:
        step["depends_on"] = depends_on
    step.update(_placement(run.lane, run.timeout_in_minutes, run.retry, run.spec.visibility_vars))
    soft_fail = run.lane.soft_fail
    if soft_fail is True:
        step["soft_fail"] = True
    elif soft_fail:  # the exit statuses that may soft-fail
        step["soft_fail"] = [{"exit_status": status} for status in soft_fail]
    return step


def group_step(run: LaneRun, group: str | None, connectors: list[str]) -> dict[str, Any]:
    """One job running ``connectors`` (a connector group, or a whole lane when ``group`` is None)."""
    key = f"{KEY_PREFIX}-test-{run.name}" + (f"-{group}" if group else "")
    junit = f"{run.junit_dir()}/{key}.xml"
    step = _test_step(run, key, run.label(group))
    step["commands"] = [for_upload(line) for line in (
        join(["rm", "-f", "--", junit]),
        *preamble(run.lane),
        in_test_env(suite_words(run, connectors, junit), run.lane, run.spec.visibility_vars),
    )]
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
    branches = [f"{job}) " + in_test_env(suite_words(run, connectors[job::jobs], junits[job]), run.lane,
                                           run.spec.visibility_vars) + " ;;"
                for job in range(jobs)]
    job_index = Raw('"$BUILDKITE_PARALLEL_JOB"')
    no_shard = join(["echo", f"kvconform: {key} has {jobs} jobs; no connectors for job", job_index])
    step["commands"] = [for_upload(line) for line in (
        join(["rm", "-f", "--", *junits]),
        *preamble(run.lane),
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

    ``kvconform report`` runs with ``--exit-zero``: the test steps already carry the
    verdict, and Buildkite's shell stops at the first failing command, which would skip
    the annotation of a red build. The annotation's style comes from Buildkite's own
    outcome of each test step: error
    if any failed or never finished (a crash that wrote no JUnit counts too), warning
    if one soft-failed, else success. A platform whose steps uploaded no JUnit file
    is named in the annotation (and makes it an error) instead of stopping the step
    before it annotates. The step fails only if the report does. When the build makes its
    image, it depends on that image's step and on every test step (failed or not): Buildkite
    starts a step with ``depends_on`` without waiting for the ``wait`` before it.
    """
    suffix = "-".join(platforms)
    report = in_test_env(["python3", "-P", "-m", "kvconform", "report", Raw(f"{JUNIT_ROOT}/*/*.xml"),
                            "--out", REPORT_OUT, "--exit-zero"], config.report)
    annotate = join(["buildkite-agent", "annotate", "--style", Raw('"$style"'), "--context", f"{KEY_PREFIX}-{suffix}"])
    summary = join([f"{REPORT_OUT}/summary.md"])
    every_platform_missing = join(["".join(f" {platform}" for platform in platforms)])
    lines = [
        join(["rm", "-rf", "--", REPORT_OUT]),
        *preamble(config.report),
        "missing=",
        *[f"{join(['buildkite-agent', 'artifact', 'download', f'{JUNIT_ROOT}/{platform}/*.xml', '.'])}"
          f' || missing="$missing {platform}"' for platform in platforms],
        "style=success",
        f"for key in {join(test_keys)}; do",
        '  case "$(buildkite-agent step get outcome --step "$key")" in',
        "    passed) ;;",
        '    soft_failed) if [ "$style" = success ]; then style=warning; fi ;;',
        "    *) style=error ;;",
        "  esac",
        "done",
        'if [ -n "$missing" ]; then style=error; fi',
        f'if [ "$missing" != {every_platform_missing} ]; then',
        f"  {report}",
        "else",
        f"  mkdir -p {join([REPORT_OUT])} && echo '## kvconform: no results' > {summary}",
        "fi",
        'if [ -n "$missing" ]; then',
        "  printf '\\n**kvconform: no JUnit results from:%s** (those test steps wrote or uploaded none; "
        f"see their logs)\\n' \"$missing\" >> {summary}",
        "fi",
        f"{annotate} < {summary}",
    ]
    step: dict[str, Any] = {"label": ":memo: kvconform report", "key": f"{KEY_PREFIX}-report-{suffix}"}
    image_build_step = build_step_of(config, config.report, None)
    if image_build_step is not None:
        # A step with depends_on no longer waits for the `wait` before it: name the test steps too, failed or not.
        step["depends_on"] = [image_build_step, *({"step": key, "allow_failure": True} for key in test_keys)]
    step.update(_placement(config.report, config.timeout_of(config.report), config.retry_of(None)))
    step["commands"] = [for_upload(line) for line in lines]
    return step
