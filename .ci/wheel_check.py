"""kvconform as its users get it: the bootstrap's wheel in a fresh environment gives the checkout's verdicts.

Every user outside this repository runs kvconform from a wheel (the generated steps install the bootstrap's
wheel into vLLM CI's image; ``pip install`` does the same), while the project's own runs use an editable
install from the checkout. Where kvconform's modules live can change what runs (the folder pytest counts as a
test module's root, the data files a wheel must carry), so ``make test-wheel`` (this script) checks the wheel:

1. builds it as ``pipelines/bootstrap.yml`` builds it: that step's own commands, up to its ``pip wheel``, run by
   bash with ``KVCONFORM_SPEC`` naming a copy of the checkout (``tests/wheel_build.py``: a build writes
   kvconform.egg-info into the tree it builds);
2. makes a fresh environment holding the venv's vLLM and packages and vLLM CI's pinned test tools
   (``VLLM_CI_PINS``) but no checkout on the path: a copy of the venv, hard-linked where the temporary folder
   is on the venv's file system (seconds, and no disk: pip and Python replace a file, so nothing written in
   the copy writes through a link into the venv), a plain copy elsewhere; kvconform is uninstalled from it,
   the pins installed, then the wheel; it checks that kvconform imports from the copy's site-packages, that
   the pins stayed, and that no folder of the checkout is on the copy's path;
3. runs the suite command make gives it (``STRICT_SUITE``) there, as ``python -P``, from an empty folder
   outside the checkout, then compares each test's outcome with the editable run's JUnit, test id by test id
   (the id without the folder it was collected from, which is not the same: ``conformance/test_x.py`` from
   the checkout, ``test_x.py`` from ``--pyargs`` elsewhere); every difference is listed, and any fails;
4. in the same environment, gates two changes to a vLLM-like checkout (``tests/gate/vllm_checkout.py``, of
   the venv's vLLM): a comment beside ExampleConnector's load must PASS, a ``.cuda()`` load must FAIL naming
   the device.

What it writes goes under ``--out`` (the wheel run's junit.xml, each gate's results and output) and a
temporary folder it removes. Bad input (no editable JUnit, no venv) is one line and exit 2; a difference or a
wrong verdict is exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the project's own helpers: tests/ (kvconform itself is the venv's editable install)

from kvconform.reports import compare  # noqa: E402
from kvconform.reports.readers import ReportInputError, read  # noqa: E402
from tests.gate.vllm_checkout import (  # noqa: E402
    COMMENTED,
    CUDA_LOAD,
    ROUNDTRIP_ONLY,
    GitFailed,
    build_template,
    change_example,
    clone_template,
)
from tests.wheel_build import copy_source  # noqa: E402

BOOTSTRAP = ROOT / "pipelines" / "bootstrap.yml"
# vLLM CI's requirements/test.txt pins these; kvconform's ranges must keep them
VLLM_CI_PINS = {"pytest": "8.3.3", "pytest-timeout": "2.3.1", "pyyaml": "6.0.2"}
DEVICE_NAMED = "the connector moved or created a tensor on cuda"
# change -> (its load line, the gate's exit status, a line the verdict must hold, what each FAILED line must say)
GATES: dict[str, tuple[str, int, str, str | None]] = {
    "comment": (COMMENTED, 0, "kvconform gate: PASS: ExampleConnector, MultiConnector on cpu", None),
    "cuda-load": (CUDA_LOAD, 1, "kvconform gate: FAIL on cpu", DEVICE_NAMED),
}
PIP = ("-m", "pip", "--disable-pip-version-check")
SHOWN_FAILURES = 2  # of a gate's verdict, in the step's output (the log has them all)
# what the fresh environment's processes see: nothing of the caller's path, no activated venv
CLEAN_ENV = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}


class CheckFailed(Exception):
    """The wheel does not give the checkout's verdicts; the message says where."""


class BadInput(Exception):
    """The step cannot start (one line, exit 2)."""


def say(text: str) -> None:
    print(f"wheel-check: {text}", flush=True)


def run(argv: Sequence[str], cwd: Path, env: dict[str, str] = CLEAN_ENV, what: str = "") -> None:
    done = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "(no output)").splitlines()[-1]
        raise CheckFailed(f"{what or argv[0]} exited {done.returncode}: {last}")


def timed(label: str, started: float) -> None:
    say(f"{label}: {time.monotonic() - started:.1f} s")


# --- 1. the wheel, as the bootstrap builds it -----------------------------------------------------------------

def bootstrap_build_commands() -> list[str]:
    """bootstrap.yml's commands up to its ``pip wheel``, as the agent runs them (upload turns ``$$`` into ``$``)."""
    [step] = yaml.safe_load(BOOTSTRAP.read_text())["steps"]
    commands = [command.replace("$$", "$") for command in step["commands"]]
    last = next(i for i, command in enumerate(commands) if " pip wheel " in command)
    return commands[:last + 1]


def build_wheel(work: Path) -> Path:
    source = copy_source(work / "kvconform")
    build = work / "bootstrap"
    build.mkdir()
    env = {**CLEAN_ENV, "KVCONFORM_SPEC": str(source)}
    for command in bootstrap_build_commands():
        run(["bash", "-e", "-c", command], build, env, f"bootstrap.yml's `{command[:60]}`")
    [wheel] = build.glob("*/kvconform-*.whl")
    return wheel


# --- 2. the environment -------------------------------------------------------------------------------------------

def fresh_environment(venv: Path, work: Path, wheel: Path) -> Path:
    """A copy of ``venv`` without kvconform, with vLLM CI's pins, then the wheel; returns its python."""
    copy = work / "env"
    linked = os.stat(venv).st_dev == os.stat(work).st_dev
    run(["cp", "-al" if linked else "-a", str(venv), str(copy)], work, what=f"copying {venv}")
    say(f"environment: {'a hard-linked' if linked else 'a (different file system: full)'} copy of {venv}")
    python = copy / "bin" / "python"
    run([str(python), *PIP, "uninstall", "--yes", "--quiet", "kvconform"], work, what="pip uninstall kvconform")
    pins = [f"{name}=={version}" for name, version in VLLM_CI_PINS.items()]
    run([str(python), *PIP, "install", "--quiet", *pins], work, what="pip install (vLLM CI's pins)")
    run([str(python), *PIP, "install", "--quiet", str(wheel)], work, what=f"pip install {wheel.name}")
    return python


WHERE = """
import importlib.metadata as m, json, sys, kvconform
print(json.dumps({"kvconform": kvconform.__file__, "path": sys.path,
                  "versions": {name: m.version(name) for name in sys.argv[1:]}}))
"""


def check_environment(python: Path, cwd: Path) -> None:
    done = subprocess.run([str(python), "-P", "-c", WHERE, *VLLM_CI_PINS], cwd=cwd, env=CLEAN_ENV,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckFailed(f"the fresh environment cannot import kvconform: {done.stderr.strip().splitlines()[-1]}")
    found = json.loads(done.stdout)
    environment = python.parents[1]
    if not Path(found["kvconform"]).is_relative_to(environment):
        raise CheckFailed(f"kvconform imported from {found['kvconform']}, not from the environment {environment}")
    on_path = [entry for entry in found["path"] if entry and Path(entry).resolve().is_relative_to(ROOT)]
    if on_path:
        raise CheckFailed(f"the checkout is on the fresh environment's path: {', '.join(on_path)}")
    if found["versions"] != VLLM_CI_PINS:
        raise CheckFailed(f"installing the wheel moved vLLM CI's pins: {found['versions']}, not {VLLM_CI_PINS}")
    say(f"kvconform from {found['kvconform']}; {', '.join(f'{k} {v}' for k, v in found['versions'].items())}")


# --- 3. the suite, and its outcomes beside the editable run's -----------------------------------------------------

def outcomes(junit: Path) -> dict[str, list[str]]:
    """test id -> its outcomes (``kvconform compare``'s reading: the id without the folder it was collected from)."""
    try:
        results, _ = read(junit)
    except ReportInputError as exc:
        raise CheckFailed(str(exc)) from None
    return compare.outcomes(results)


def run_suite(python: Path, suite: Sequence[str], cwd: Path, junit: Path) -> int:
    command = [str(python), "-P", *suite, f"--junitxml={junit}"]
    say(f"in {cwd}: {' '.join(command)}")
    return subprocess.run(command, cwd=cwd, env=CLEAN_ENV).returncode


# --- 4. the gate --------------------------------------------------------------------------------------------------

def gate(python: Path, name: str, work: Path, template: Path, out: Path) -> None:
    line, status, verdict, failed_says = GATES[name]
    folder = work / f"gate-{name}"
    folder.mkdir()
    try:
        repo = clone_template(template, folder)
        head = change_example(repo, line, f"ExampleConnector: {name}")
    except (GitFailed, ValueError) as exc:
        raise CheckFailed(f"the {name} change could not be made: {exc}") from None
    results = out / f"gate-{name}"
    command = [str(python), "-P", "-m", "kvconform", "gate", "--repo", str(repo.path), "--base", repo.base,
               "--head", head, "--run", "--platform=cpu", "-k", ROUNDTRIP_ONLY, "--results", str(results)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=folder, env=CLEAN_ENV, capture_output=True, text=True)
    log = out / f"gate-{name}.log"
    log.write_text(done.stdout + done.stderr)
    timed(f"gate on the {name} change (output in {log})", started)
    lines = done.stdout.splitlines()
    for shown in (text for text in lines if text.startswith("kvconform gate: ")):
        print(f"  {shown}")
    failed = [text.strip() for text in lines if text.startswith("  FAILED ")]  # the verdict's list
    for shown in failed[:SHOWN_FAILURES]:
        print(f"    {shown}")
    wrong = [] if done.returncode == status else [f"exit {done.returncode}, not {status}"]
    wrong += [] if any(text.startswith(verdict) for text in lines) else [f"no line `{verdict}`"]
    if failed_says is not None:
        wrong += [] if failed else ["no FAILED line"]
        wrong += [f"`{text[:120]}` does not say `{failed_says}`" for text in failed if failed_says not in text]
    if wrong:
        raise CheckFailed(f"the gate on the {name} change: {'; '.join(wrong)} (see {log})")


# --- the step -----------------------------------------------------------------------------------------------------

def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=".ci/wheel_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, required=True, help="the environment to copy (vLLM and the tools)")
    parser.add_argument("--editable-junit", type=Path, required=True, metavar="FILE",
                        help="the editable run's JUnit (make test writes reports/out/test-cpu/junit.xml)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where the step's results go")
    parser.add_argument("suite", nargs=argparse.REMAINDER, help="-- then the suite's arguments after python")
    args = parser.parse_args(argv)
    if args.suite[:1] == ["--"]:
        args.suite = args.suite[1:]
    if not args.suite:
        raise BadInput("give the suite's command after --, e.g. -- -m pytest --pyargs kvconform.conformance ...")
    if not (args.venv / "bin" / "python").is_file():
        raise BadInput(f"--venv {args.venv}: no bin/python there")
    if not args.editable_junit.is_file():
        raise BadInput(f"--editable-junit {args.editable_junit}: no such file (make test writes it; run it first)")
    return args


def check(args: argparse.Namespace) -> None:
    editable = outcomes(args.editable_junit)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out.resolve()
    with tempfile.TemporaryDirectory(prefix="kvconform-wheel-check-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        wheel = build_wheel(work)
        timed(f"built {wheel.name} as bootstrap.yml does", started)
        started = time.monotonic()
        python = fresh_environment(args.venv.resolve(), work, wheel)
        outside = work / "run"
        outside.mkdir()
        check_environment(python, outside)
        timed("fresh environment", started)

        started = time.monotonic()
        status = run_suite(python, args.suite, outside, out / "junit.xml")
        timed(f"the suite from the wheel (exit {status})", started)
        from_wheel = outcomes(out / "junit.xml")
        diff = compare.differences(editable, from_wheel, ("editable", "wheel"))
        for line in diff:
            print(f"  {line}")
        say(f"{len(diff)} difference(s) over {len(editable.keys() | from_wheel.keys())} test ids "
            f"between {args.editable_junit} and the wheel's {out / 'junit.xml'}")

        started = time.monotonic()
        try:
            template = build_template(work / "vllm-template")
        except GitFailed as exc:
            raise CheckFailed(f"the vLLM-like checkout could not be built: {exc}") from None
        timed("vLLM-like checkout", started)
        problems = []
        for name in GATES:
            try:
                gate(python, name, work, template, out)
            except CheckFailed as exc:
                problems.append(str(exc))
    if diff:
        problems.insert(0, f"{len(diff)} test(s) whose outcome from the wheel is not the editable run's (above)")
    if status != 0:
        problems.insert(0, f"the suite from the wheel exited {status}")
    if problems:
        raise CheckFailed("; ".join(problems))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        check(args)
    except BadInput as exc:
        print(f"wheel-check: error: {exc}", file=sys.stderr)
        return 2
    except CheckFailed as exc:
        print(f"wheel-check: FAILED: {exc}", file=sys.stderr)
        return 1
    say("passed: the wheel gives the editable run's outcomes, and its gate the right verdicts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
