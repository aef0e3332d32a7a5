"""How long the CPU conformance suite takes on this machine, and where the time goes.

It measures and optimises nothing (the targets are in benchmarks/README.md). Each run is a fresh pytest
process, recorded with the load average and the CPU time of its process tree (a shared machine makes wall
times noisy; CPU time moves less), and writes results.json, so ``--compare A B`` proves a speed-up changed
no outcome. Where the time goes comes from the runs: ``--durations``, seconds per check and connector from
JUnit, collection, vLLM's import, and ``phase_probe.py`` in every test process. A fixed loop timed in a
fresh interpreter before each run tells a slow host from slow code; ``--rounds N`` repeats the runs and
reports the median round. ``one-core`` pins a serial run to one core: against it, serial says what a
second core gives a serial run (NIXL's pollers use it) and ``-n 2`` what two workers give.

    .venv/bin/python benchmarks/suite_timing.py [--runs serial,xdist,gate] [--json FILE] [--results-dir DIR]
    .venv/bin/python benchmarks/suite_timing.py --runs serial,xdist --rounds 5 [--connector NixlConnector]
    .venv/bin/python benchmarks/suite_timing.py --compare BEFORE.results.json AFTER.results.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kvconform.reports.junit import read_junit_file

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "reports" / "out" / "suite-timing.json"
DEFAULT_RESULTS_DIR = ROOT / "reports" / "out" / "suite-timing"
SUITE = ["--pyargs", "kvconform.conformance", "--platform=cpu", "-m", "not engine", "-p", "no:cacheprovider", "-q"]


@dataclass(frozen=True)
class SuiteRun:
    name: str
    doc: str
    args: tuple[str, ...]
    target_s: float | None  # wall-time target, where one is set
    one_core: bool = False  # pinned to one of the cores this script may use, every thread it starts included


RUNS: dict[str, SuiteRun] = {r.name: r for r in (
    SuiteRun("serial", "full CPU suite without the engine tier, one process", tuple(SUITE), 60.0),
    SuiteRun("one-core", "the serial run pinned to one core: what a second core gives a serial run", tuple(SUITE),
             None, one_core=True),
    SuiteRun("xdist", "the same with -n 2", (*SUITE, "-n", "2"), None),
    SuiteRun("gate", "one connector's tests (what kvconform gate --run runs for an ExampleConnector change)",
             (*SUITE, "--connector", "ExampleConnector"), 10.0),
    SuiteRun("collect", "collection only: the fixed cost every pytest run pays before its first test",
             (*SUITE, "--collect-only"), None),
)}
# The runs that select the same tests, so their outcomes must agree test for test.
SAME_TESTS = ("serial", "xdist")
DURATIONS = 30  # pytest --durations=N for the timed runs

# What a fresh worker process imports from vLLM before its first test (the harness's own imports).
VLLM_IMPORTS = ("import vllm.config; "
                "from vllm.v1.core.sched.scheduler import Scheduler; "
                "from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory; "
                "from vllm.forward_context import set_forward_context; "
                "from vllm.v1.worker.utils import allocate_kv_cache")
DURATION_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*)$")
SUMMARY_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected|warnings?)")
# phase_probe.py's lines: "phase_probe[gw0]: session finished  at 21.14 s wall 19.69 s CPU (harness thread
# 16.86 s, waited for a core 3.47 s; other threads 2.84 s)" and "... context switches: 2002 voluntary, 9408 involuntary"
PROBE_STAGE = re.compile(r"^phase_probe(?:\[(?P<worker>[^\]]+)\])?: "
                         r"(?P<stage>collection finished|session finished) +at +(?P<wall>[\d.]+) s wall .*"
                         r"\(harness thread +(?P<harness>[\d.]+) s, waited for a core +(?P<waited>[\d.]+) s; "
                         r"other threads +(?P<others>[\d.]+) s\)$")
PROBE_SWITCHES = re.compile(r"^phase_probe(?:\[(?P<worker>[^\]]+)\])?: harness thread context switches: "
                            r"\d+ voluntary, (?P<involuntary>\d+) involuntary")
PROBE = ("-p", "phase_probe")  # benchmarks/ is put on the runs' PYTHONPATH
# The host's speed just before a run: the median of three passes of a fixed pure-Python loop (0.07-0.14 s each
# on this project's CI kind of machine, on one day), in a fresh interpreter, as a run's own processes are.
HOST_REFERENCE = ("import statistics, time\n"
                  "def one_pass():\n"
                  "    start = time.perf_counter()\n"
                  "    sum(i * i for i in range(2_000_000))\n"
                  "    return time.perf_counter() - start\n"
                  "print(statistics.median([one_pass() for _ in range(3)]))")


@dataclass
class RunResult:
    name: str
    doc: str
    command: list[str]
    wall_s: float
    exit_status: int
    target_s: float | None
    load_before: list[float]
    load_after: list[float]
    counts: dict[str, int] = field(default_factory=dict)
    durations: list[dict] = field(default_factory=list)  # pytest's --durations=15 lines
    by_check: dict[str, float] = field(default_factory=dict)  # JUnit seconds per kvconform.check
    by_connector: dict[str, float] = field(default_factory=dict)  # JUnit seconds per kvconform.connector
    by_outcome: dict[str, float] = field(default_factory=dict)  # JUnit seconds per outcome (skips cost too)
    tail: str = ""
    cpu_s: float = 0.0  # user + sys of pytest and every process it waited for (xdist workers included)
    results_json: str | None = None  # kvconform's results.json of this run (--kvconform-json)
    processes: list[dict] = field(default_factory=list)  # per test process, from phase_probe (parse_probe)
    host_reference_s: float | None = None  # HOST_REFERENCE's seconds just before the run (None: not taken)

    @property
    def met(self) -> bool | None:
        return None if self.target_s is None else self.wall_s <= self.target_s


def _ordered(seconds: dict[str, float]) -> dict[str, float]:
    return dict(sorted(((k, round(v, 2)) for k, v in seconds.items()), key=lambda kv: -kv[1]))


def _junit_seconds(path: Path) -> tuple[dict[str, float], ...]:
    """Seconds per kvconform.check, per kvconform.connector and per outcome, from a JUnit file."""
    sums: tuple[dict[str, float], ...] = (defaultdict(float), defaultdict(float), defaultdict(float))
    if not path.exists():
        return {}, {}, {}
    for case in read_junit_file(path).cases:
        props = case.properties
        for total, key in zip(sums, (props.get("kvconform.check", "-"), props.get("kvconform.connector", "-"),
                                     case.junit_outcome), strict=True):
            total[key] += case.seconds
    return tuple(_ordered(total) for total in sums)


def parse_output(output: str) -> tuple[list[dict], dict[str, int]]:
    """pytest's ``--durations`` lines and its final counts ("3 passed, 1 skipped in 2.0s")."""
    lines = output.splitlines()
    durations = [{"seconds": float(m[1]), "phase": m[2], "test": m[3]} for m in map(DURATION_LINE.match, lines) if m]
    last = next((line for line in reversed(lines) if SUMMARY_COUNTS.search(line)), "")
    counts = {kind.rstrip("s") if kind.startswith(("error", "warning")) else kind: int(n)
              for n, kind in SUMMARY_COUNTS.findall(last)}
    return durations, counts


def parse_probe(output: str) -> list[dict]:
    """Per test process (``process`` when it is the only one, or each xdist worker): its harness thread's
    CPU before the first test and in the tests, its wait for a core, its sleep in the tests, its
    preemptions, and its other threads' CPU.

    A process that collected nothing (the xdist controller) has no ``collection finished`` line and is left out.
    """
    stages: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    involuntary: dict[str, int] = {}
    for line in output.splitlines():
        if stage := PROBE_STAGE.match(line):
            figures = {k: float(stage[k]) for k in ("wall", "harness", "waited", "others")}
            stages[stage["worker"] or "process"][stage["stage"]] = figures
        elif switches := PROBE_SWITCHES.match(line):
            involuntary[switches["worker"] or "process"] = int(switches["involuntary"])
    processes = []
    for name, seen in sorted(stages.items()):
        collected, finished = seen.get("collection finished"), seen.get("session finished")
        if collected is None or finished is None:
            continue
        in_tests = {k: finished[k] - collected[k] for k in ("wall", "harness", "waited")}
        processes.append({"process": name, "harness_before_tests_s": collected["harness"],
                          "harness_in_tests_s": round(in_tests["harness"], 2),
                          "waited_for_a_core_s": finished["waited"],
                          # the tests' wall time the harness thread neither ran nor waited for a core: it slept
                          # (on a connector's threads, a lock, a timer)
                          "asleep_in_tests_s": round(max(in_tests["wall"] - in_tests["harness"] - in_tests["waited"],
                                                         0.0), 2),
                          "other_threads_s": finished["others"], "preempted": involuntary.get(name)})
    return processes


def _tail(output: str, lines: int = 5) -> str:
    """The output's last lines, without phase_probe's (printed at exit, after pytest's summary)."""
    return "\n".join([line for line in output.splitlines() if not line.startswith("phase_probe")][-lines:])


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _pin_to_one_core() -> None:
    """In the child before it starts: the last of the cores this script may use (threads inherit it)."""
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def run_suite(run: SuiteRun, python: str, scratch: Path, timeout: float, results_dir: Path | None = None) -> RunResult:
    junit = scratch / f"{run.name}.xml"
    results = None if run.name == "collect" or results_dir is None else results_dir / f"{run.name}.results.json"
    extra = [] if run.name == "collect" else [f"--durations={DURATIONS}", f"--junitxml={junit}", *PROBE]
    if results is not None:
        extra.append(f"--kvconform-json={results}")
    command = [python, "-m", "pytest", *run.args, *extra]
    before = list(os.getloadavg())
    cpu_before = _children_cpu_s()
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"),
                                                                      os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env,
                              preexec_fn=_pin_to_one_core if run.one_core else None)
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status, output = 124, f"timed out after {timeout:.0f} s\n{exc.stdout or ''}"
    wall = time.perf_counter() - start
    cpu = _children_cpu_s() - cpu_before
    durations, counts = parse_output(output)
    by_check, by_connector, by_outcome = _junit_seconds(junit)
    return RunResult(run.name, run.doc, command, round(wall, 2), status, run.target_s, before,
                     list(os.getloadavg()), counts, durations, by_check, by_connector, by_outcome,
                     _tail(output), round(cpu, 2),
                     str(results) if results is not None and results.exists() else None, parse_probe(output))


# ----------------------------------------------------------------------------- same outcomes


class CompareInputError(Exception):
    """A file given to --compare is not a kvconform results.json."""


def outcomes(path: Path) -> dict[str, str]:
    """Test node id -> outcome, from a kvconform results.json (``kvconform report``'s format)."""
    try:
        doc = json.loads(path.read_text())
        return {test["nodeid"]: test["outcome"] for test in doc["tests"]}
    except OSError as exc:
        raise CompareInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CompareInputError(f"{path}: not a kvconform results.json ({type(exc).__name__}: {exc})") from None


@dataclass
class OutcomeDiff:
    """How two runs' outcomes differ: tests only one ran, and tests whose outcome changed."""

    only_before: list[str]
    only_after: list[str]
    changed: list[tuple[str, str, str]]  # (node id, before, after)
    same: int

    @property
    def identical(self) -> bool:
        return not (self.only_before or self.only_after or self.changed)

    def lines(self, before: str, after: str) -> list[str]:
        head = (f"same tests, same outcomes ({self.same} tests)" if self.identical else
                f"outcomes differ: {len(self.changed)} changed, {len(self.only_before)} only in {before}, "
                f"{len(self.only_after)} only in {after} ({self.same} tests agree)")
        return [head,
                *(f"  changed {nodeid}: {a} -> {b}" for nodeid, a, b in self.changed),
                *(f"  only in {before}: {nodeid}" for nodeid in self.only_before),
                *(f"  only in {after}: {nodeid}" for nodeid in self.only_after)]


def compare_outcomes(before: dict[str, str], after: dict[str, str]) -> OutcomeDiff:
    common = sorted(before.keys() & after.keys())
    changed = [(n, before[n], after[n]) for n in common if before[n] != after[n]]
    return OutcomeDiff(sorted(before.keys() - after.keys()), sorted(after.keys() - before.keys()), changed,
                       len(common) - len(changed))


def host_reference_seconds(python: str) -> float | None:
    """HOST_REFERENCE's seconds now (None where the interpreter could not run it: the run then says so itself)."""
    done = subprocess.run([python, "-c", HOST_REFERENCE], cwd=ROOT, capture_output=True, text=True)
    try:
        return round(float(done.stdout.strip()), 3)
    except ValueError:  # it failed, or printed something else first
        return None


def vllm_import_seconds(python: str, repeat: int = 3) -> float:
    """Median seconds a fresh interpreter takes to import the vLLM modules the harness needs."""
    code = f"import time; t = time.perf_counter(); {VLLM_IMPORTS}; print(time.perf_counter() - t)"
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}
    samples = []
    for _ in range(repeat):
        done = subprocess.run([python, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise SystemExit(f"suite_timing: importing vLLM failed: {done.stderr.strip().splitlines()[-1:]}")
        samples.append(float(done.stdout.strip().splitlines()[-1]))
    return statistics.median(samples)


# ----------------------------------------------------------------------------- findings


def speedup(results: dict[str, RunResult]) -> float | None:
    """Serial wall time over ``-n 2``'s, where a round has both."""
    serial, xdist = results.get("serial"), results.get("xdist")
    return serial.wall_s / xdist.wall_s if serial and xdist and xdist.wall_s else None


def median_round(speedups: list[float | None]) -> int:
    """The index of the round whose speedup is the median (the lower of the middle two for an even count; the
    last round where no round has one)."""
    measured = sorted((value, index) for index, value in enumerate(speedups) if value is not None)
    return measured[(len(measured) - 1) // 2][1] if measured else len(speedups) - 1


def findings(results: dict[str, RunResult], import_s: float) -> list[str]:
    """Plain statements read off the measurements (the report's suggestions start from these)."""
    notes = []
    serial, xdist, gate, collect = (results.get(n) for n in ("serial", "xdist", "gate", "collect"))
    if (ratio := speedup(results)) is not None:
        notes.append(f"-n 2 is {ratio:.2f}x serial")
    if (one_core := results.get("one-core")) and serial:
        notes.append(f"the serial run on one core took {one_core.wall_s:.1f} s against {serial.wall_s:.1f} s on "
                     f"every core: a second core makes a serial run {one_core.wall_s / serial.wall_s:.2f}x as fast")
        if xdist:
            notes.append(f"-n 2 is {one_core.wall_s / xdist.wall_s:.2f}x the serial run on one core")
    if serial and xdist and xdist.cpu_s:
        notes.append(f"-n 2 used {xdist.cpu_s:.1f} s of CPU (user+sys) against serial's {serial.cpu_s:.1f} s: "
                     f"{xdist.cpu_s - serial.cpu_s:+.1f} s for the second worker's start-up and contention")
    for run in (serial, xdist, gate):
        if run:
            notes.append(f"{run.name}: vLLM import ({import_s:.1f} s per process) is "
                         f"{100 * import_s / run.wall_s:.0f}% of its {run.wall_s:.1f} s wall time")
    if collect:
        notes.append(f"collection alone takes {collect.wall_s:.1f} s per pytest run (vLLM import included); "
                     f"with -n 2 each worker collects again")
    for run in (serial, xdist, gate):
        for process in run.processes if run else ():
            preempted = "" if process["preempted"] is None else f" ({process['preempted']} preemptions)"
            label = run.name if process["process"] == "process" else f"{run.name} {process['process']}"
            notes.append(f"{label}: harness thread {process['harness_before_tests_s']:.1f} s of CPU before the "
                         f"first test, {process['harness_in_tests_s']:.1f} s in the tests, "
                         f"{process['waited_for_a_core_s']:.1f} s waiting for a core{preempted}, "
                         f"{process['asleep_in_tests_s']:.1f} s asleep in the tests; other threads "
                         f"{process['other_threads_s']:.1f} s of CPU")
    if serial and serial.by_outcome:
        notes.append(f"serial: {sum(serial.by_outcome.values()):.1f} s inside tests (the rest of "
                     f"{serial.wall_s:.1f} s is start-up and collection); by outcome: "
                     + ", ".join(f"{k} {v:.1f} s" for k, v in serial.by_outcome.items()))
    if serial and serial.by_check:
        total = sum(serial.by_check.values()) or 1.0
        shares = ", ".join(f"{check} {100 * s / total:.0f}%" for check, s in list(serial.by_check.items())[:4])
        notes.append(f"serial test time by check: {shares}")
    if serial and serial.by_connector:
        total = sum(serial.by_connector.values()) or 1.0
        shares = ", ".join(f"{name} {100 * s / total:.0f}%" for name, s in list(serial.by_connector.items())[:4])
        notes.append(f"serial test time by connector: {shares}")
    return notes


def table(results: dict[str, RunResult]) -> str:
    rows = [("run", "wall s", "cpu s", "target", "met", "exit", "tests", "load avg before/after", "host ref s")]
    for r in results.values():
        counts = " ".join(f"{n} {k}" for k, n in r.counts.items() if k not in ("warning",))
        target = f"<= {r.target_s:.0f} s" if r.target_s else "-"
        met = {None: "-", True: "yes", False: "no"}[r.met]
        rows.append((r.name, f"{r.wall_s:.1f}", f"{r.cpu_s:.1f}", target, met, str(r.exit_status), counts,
                     f"{r.load_before[0]:.2f} / {r.load_after[0]:.2f}",
                     "-" if r.host_reference_s is None else f"{r.host_reference_s:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _restricted(run: SuiteRun, connectors: list[str]) -> SuiteRun:
    """``run`` on the given connectors only; its target no longer applies (it is the whole suite's)."""
    if not connectors or run.name == "gate":
        return run
    chosen = [arg for name in connectors for arg in ("--connector", name)]
    return SuiteRun(run.name, f"{run.doc}, {', '.join(connectors)} only", (*run.args, *chosen), None)


README_RUNS = {"serial": "full CPU suite without the engine tier, serial",
               "one-core": "the same on one core",
               "xdist": "the same with `-n 2`",
               "gate": "one connector (`--connector ExampleConnector`)"}


def readme_table(results: dict[str, RunResult]) -> str:
    """The README's speed table, regenerated from one invocation's runs (paste it over the old one)."""
    ratio = speedup(results)
    rows = ["| run | wall time | CPU time (user+sys) | load avg before / after | target |", "|---|---|---|---|---|"]
    for name, label in README_RUNS.items():
        run = results.get(name)
        if run is None:
            continue
        shown = f" ({ratio:.2f}x)" if name == "xdist" and ratio is not None else ""
        target, met = f"<= {run.target_s:.0f} s" if run.target_s else None, run.met
        verdict = f"{target}: " + ("met" if met else "**not met**") if target else "-"  # --connector: none
        rows.append(f"| {label} | {run.wall_s:.1f} s{shown} | {run.cpu_s:.1f} s | "
                    f"{run.load_before[0]:.1f} / {run.load_after[0]:.1f} | {verdict} |")
    return "\n".join(rows)


THREAD_ROWS = (("harness thread's CPU before the first test (imports, collection)", "harness_before_tests_s",
                "{:.1f} s"),
               ("harness thread's CPU in the tests", "harness_in_tests_s", "{:.1f} s"),
               ("harness thread runnable but waiting for a core", "waited_for_a_core_s", "{:.1f} s"),
               ("harness thread asleep in the tests (on other threads, locks, timers)", "asleep_in_tests_s",
                "{:.1f} s"),
               ("harness thread preempted (involuntary context switches)", "preempted", "{:,}"),
               ("other threads' CPU (a connector's, torch's, vLLM's)", "other_threads_s", "{:.1f} s"))


def readme_threads_table(results: dict[str, RunResult]) -> str:
    """Serial against each -n 2 worker, from phase_probe: the README's table of where the two workers lose."""
    columns = [(label, results[name].processes) for name, label in (("serial", "serial"), ("xdist", "`-n 2`"))
               if name in results and results[name].processes]
    if not columns:
        return ""
    header = " | ".join(label if len(procs) == 1 else f"{label}: {', '.join(p['process'] for p in procs)}"
                        for label, procs in columns)
    rows = [f"| | {header} |", "|---|" + "---|" * len(columns)]
    for label, key, form in THREAD_ROWS:
        cells = (", ".join("-" if p[key] is None else form.format(p[key]) for p in procs) for _, procs in columns)
        rows.append(f"| {label} | {' | '.join(cells)} |")
    return "\n".join(rows)


def _wall_and_reference(run: RunResult | None) -> str:
    if run is None:
        return "-"
    reference = "" if run.host_reference_s is None else f" ({run.host_reference_s:.2f} s)"
    return f"{run.wall_s:.1f} s{reference}"


def rounds_table(rounds: list[dict[str, RunResult]]) -> str:
    """Every round's wall times, each beside the host reference taken just before it: the README's table of rounds."""
    names = [name for name in README_RUNS if any(name in one for one in rounds)]
    paired = all(name in names for name in SAME_TESTS)
    header = ["round", *(README_RUNS[name] for name in names), *(["`-n 2` against serial"] if paired else [])]
    rows = [f"| {' | '.join(header)} |", "|---" * len(header) + "|"]
    for number, one in enumerate(rounds, 1):
        cells = [str(number), *(_wall_and_reference(one.get(name)) for name in names)]
        if paired:
            ratio = speedup(one)
            cells.append("-" if ratio is None else f"{ratio:.2f}x")
        rows.append(f"| {' | '.join(cells)} |")
    return "\n".join(rows)


def tally(rounds: list[dict[str, RunResult]]) -> list[str]:
    """Each target over every round (met in k of N), and how far the host's own speed moved across the runs."""
    notes = []
    for name, label in README_RUNS.items():
        runs = [one[name] for one in rounds if name in one]
        if runs and runs[0].target_s is not None:
            walls = sorted(r.wall_s for r in runs)
            notes.append(f"{label}: <= {runs[0].target_s:.0f} s in {sum(bool(r.met) for r in runs)} of {len(runs)} "
                         f"rounds ({walls[0]:.1f}-{walls[-1]:.1f} s)")
    ratios = [ratio for ratio in map(speedup, rounds) if ratio is not None]
    if ratios:
        notes.append(f"-n 2 against serial in {len(ratios)} rounds: {min(ratios):.2f}x-{max(ratios):.2f}x")
    references = [r.host_reference_s for one in rounds for r in one.values() if r.host_reference_s]
    if references:
        notes.append(f"host reference loop before each run: {min(references):.2f}-{max(references):.2f} s "
                     f"({max(references) / min(references):.2f}x apart): the host's own speed moved that much")
    return notes


def compare_main(before: Path, after: Path) -> int:
    try:
        diff = compare_outcomes(outcomes(before), outcomes(after))
    except CompareInputError as exc:
        print(f"suite_timing: --compare: {exc}", file=sys.stderr)
        return 2
    print("\n".join(diff.lines(str(before), str(after))))
    return 0 if diff.identical else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="collect,gate,serial,xdist",
                        help=f"comma-separated runs from: {', '.join(RUNS)} (default: all)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter with kvconform and vLLM")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="FILE",
                        help=f"where to write the JSON (default: {DEFAULT_JSON.relative_to(ROOT)})")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS_DIR, metavar="DIR",
                        help="where each run writes its results.json (<run>.results.json; default: "
                             f"{DEFAULT_RESULTS_DIR.relative_to(ROOT)})")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default: 1800)")
    parser.add_argument("--connector", action="append", default=[], metavar="NAME",
                        help="restrict the serial, -n 2 and collect runs to these connectors' tests (repeatable): a "
                             "subset that finishes on a loaded machine, for before/after comparisons")
    parser.add_argument("--rounds", type=int, default=1, metavar="N",
                        help="take the runs N times back to back and report each round's -n 2 speedup and their "
                             "median; the tables are the median round's (default: 1)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"),
                        help="compare two results.json files test by test and exit (1 when any outcome differs)")
    args = parser.parse_args(argv)
    if args.compare:
        return compare_main(*args.compare)
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    unknown = [n for n in names if n not in RUNS]
    if unknown or not names:
        parser.error(f"--runs: unknown run {', '.join(unknown) or '(none given)'}; choose from {', '.join(RUNS)}")
    if args.rounds < 1:
        parser.error(f"--rounds: at least 1, not {args.rounds}")
    if shutil.which(args.python) is None:
        parser.error(f"--python: {args.python} is not an interpreter this machine can run")

    runs = {name: _restricted(run, args.connector) for name, run in RUNS.items()}
    import_s = vllm_import_seconds(args.python)
    rounds: list[dict[str, RunResult]] = []
    with tempfile.TemporaryDirectory(prefix="kvconform-suite-timing-") as scratch:
        for number in range(1, args.rounds + 1):
            results_dir = args.results_dir if args.rounds == 1 else args.results_dir / f"round-{number}"
            results_dir.mkdir(parents=True, exist_ok=True)
            rounds.append({})
            for name in names:
                print(f"suite_timing: round {number}/{args.rounds}: {name}: {runs[name].doc} ...", file=sys.stderr,
                      flush=True)
                reference = host_reference_seconds(args.python)
                rounds[-1][name] = run_suite(runs[name], args.python, Path(scratch), args.timeout, results_dir)
                rounds[-1][name].host_reference_s = reference
    speedups = [speedup(r) for r in rounds]
    chosen = median_round(speedups)
    results = rounds[chosen]
    notes = findings(results, import_s)
    if args.rounds > 1:
        notes[:0] = tally(rounds)
    if args.rounds > 1 and any(s is not None for s in speedups):
        measured = [s for s in speedups if s is not None]
        middle = speedups[chosen]
        notes.insert(0, f"-n 2 against serial in {len(measured)} rounds: "
                        f"{', '.join(f'{s:.2f}x' for s in measured)}; median {middle:.2f}x (round {chosen + 1}, whose "
                        "runs the tables show)")
    paired = [results[n] for n in SAME_TESTS if n in results and results[n].results_json]
    agree = None
    if len(paired) == 2:
        diff = compare_outcomes(*(outcomes(Path(r.results_json)) for r in paired))
        agree = diff.identical
        notes.extend(f"{SAME_TESTS[0]} vs {SAME_TESTS[1]}: {line.strip()}" for line in diff.lines(*SAME_TESTS)[:11])

    print(f"CPU conformance suite timing on {os.cpu_count()} CPUs "
          f"(load average now {os.getloadavg()[0]:.2f}; other work on this host inflates every number)")
    print(table(results))
    print(f"vLLM import in a fresh process: {import_s:.2f} s")
    for note in notes:
        print(f"- {note}")
    slowest = results.get("serial") or next(iter(results.values()))
    if slowest.durations:
        print(f"slowest test phases ({slowest.name} run, pytest --durations={DURATIONS}):")
        for d in slowest.durations:
            print(f"  {d['seconds']:7.2f}s {d['phase']:<8} {d['test']}")
    print("README table:")
    print(readme_table(results))
    if args.rounds > 1:
        print("README table of the rounds (wall time, and the host reference loop's seconds just before the run):")
        print(rounds_table(rounds))
    if threads := readme_threads_table(results):
        print("README table of the harness threads (phase_probe):")
        print(threads)

    doc = {"cpus": os.cpu_count(), "python": args.python, "vllm_import_s": round(import_s, 2),
           "findings": notes, "same_outcomes": agree,
           "runs": {name: {**asdict(r), "met": r.met} for name, r in results.items()},
           "rounds": [{"speedup": None if s is None else round(s, 3),
                       "runs": {name: {"wall_s": r.wall_s, "cpu_s": r.cpu_s, "exit_status": r.exit_status,
                                       "host_reference_s": r.host_reference_s}
                                for name, r in one.items()}} for s, one in zip(speedups, rounds, strict=True)],
           "median_round": chosen + 1}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.json} and each run's results.json in {args.results_dir}")
    # failing tests still give a valid timing; a usage error, crash, timeout or serial/-n 2 disagreement does not
    every_run = [r for one in rounds for r in one.values()]
    return 0 if all(r.exit_status in (0, 1) for r in every_run) and agree is not False else 1


if __name__ == "__main__":
    sys.exit(main())
