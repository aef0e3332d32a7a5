""".ci/run times every step against the CPU budget docs/maintaining.md states, and warns (never fails) over it.

The script's own functions run here on steps that take a fraction of a second, in a copy of the repository's
two files (``.ci/run`` up to its steps, and docs/maintaining.md with the budgets a case needs).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / ".ci" / "run"
BUDGETS = REPO / "docs" / "maintaining.md"
STEPS_START = "trap 'stop_beside; summary' EXIT\n"
BURN = """python3 -c 'while __import__("time").process_time() < 0.3: pass'"""


def _budget_rows(text: str) -> dict[str, int]:
    section = text.split("## CI's time budget", 1)[1].split("\n## ", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^\| `?([^`|]+?)`? \| (\d+) s \|", section, re.M)}


def _steps(script: str) -> list[str]:
    return re.findall(r"^step (.+)$", script, re.M)


def test_every_step_of_the_ci_run_has_a_budget_and_they_fit_the_whole_runs():
    rows = _budget_rows(BUDGETS.read_text())
    steps = _steps(RUN.read_text())
    assert steps and "make test" in steps, steps
    assert [s for s in steps if s not in rows] == [], "a step of .ci/run with no row in docs/maintaining.md"
    whole = rows.pop("whole run")
    assert sum(budget for name, budget in rows.items() if name != "make check") <= whole, rows


def _run(tmp_path: Path, steps: str, whole_run_budget: int) -> subprocess.CompletedProcess[str]:
    script = RUN.read_text()
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(script[: script.index(STEPS_START) + len(STEPS_START)] + steps)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "maintaining.md").write_text(
        "## CI's time budget\n\n| step | CPU budget |\n|---|---|\n| `python3 -c pass` | 5 s |\n"
        f"| whole run | {whole_run_budget} s |\n")
    return subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60)


def test_each_step_and_the_whole_run_print_wall_and_cpu_time_beside_the_budget(tmp_path):
    result = _run(tmp_path, f"step python3 -c pass\nstep {BURN}\n", whole_run_budget=100)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^ci: python3 -c pass +[\d.]+ s wall +[\d.]+ s CPU  \(budget 5 s CPU\), load average ", out, re.M)
    burned = re.search(r"^ci:   python3 -c while .* ([\d.]+) s CPU  \(no budget stated\)$", out, re.M)
    assert burned and float(burned[1]) >= 0.3, out
    whole = re.search(r"^ci: whole run: [\d.]+ s wall, ([\d.]+) s CPU \(budget 100 s CPU\)", out, re.M)
    assert whole and float(whole[1]) >= 0.3, out
    assert "over its budget" not in out


def test_a_run_over_its_cpu_budget_warns_in_one_line_and_keeps_its_exit_status(tmp_path):
    result = _run(tmp_path, f"step {BURN}\n", whole_run_budget=0.2)
    assert result.returncode == 0, result.stderr
    (warning,) = [line for line in result.stdout.splitlines() if "over its budget" in line]
    assert re.fullmatch(r"ci: warning: the run took [\d.]+ s of CPU, over its budget of 0.2 s "
                        r"\(docs/maintaining.md, CI's time budget\)", warning), warning


@pytest.mark.parametrize("status", [1, 3])
def test_a_failed_step_ends_the_run_with_its_status_and_the_times_so_far(tmp_path, status):
    result = _run(tmp_path, f"step python3 -c pass\nstep bash -c 'exit {status}'\nstep python3 -c 'never'\n",
                  whole_run_budget=100)
    assert result.returncode == status
    lines = [line for line in result.stdout.splitlines() if line.startswith("ci:   ")]
    assert len(lines) == 2 and lines[1].endswith(f", failed: exit {status}"), result.stdout
    assert "never" not in result.stdout


def test_work_beside_the_steps_is_joined_with_its_times_and_its_failure_fails_no_step(tmp_path):
    steps = ("beside built bash -c 'echo \"ci: environment .venv-x: built afresh\"; printf \"no%s\\n\" ise'\n"
             "beside broken bash -c 'echo half; exit 4'\n"
             "step python3 -c pass\njoined built\njoined broken\n")
    result = _run(tmp_path, steps, whole_run_budget=100)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "ci: environment .venv-x: built afresh" in out and "noise" not in out, out
    assert re.search(r"^ci:   built +[\d.]+ s wall +[\d.]+ s CPU  \(beside the steps\)$", out, re.M), out
    assert re.search(r"^ci:   broken .*\(beside the steps\), failed: exit 4$", out, re.M), out
    assert "half" in out and "ci: broken failed; the steps build again" in out
    assert (tmp_path / "reports" / "out" / "ci" / "built.log").read_text() == (
        "ci: environment .venv-x: built afresh\nnoise\n")


def test_work_beside_that_ends_during_a_step_counts_as_its_own_not_the_step_s(tmp_path):
    burn = BURN.replace("0.3", "0.6")
    steps = f"beside burner {burn}\nstep python3 -c 'import time; time.sleep(3)'\njoined burner\n"
    result = _run(tmp_path, steps, whole_run_budget=100)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    step_cpu = re.search(r"^ci:   python3 -c import time.* ([-\d.]+) s CPU", out, re.M)
    beside_cpu = re.search(r"^ci:   burner +[\d.]+ s wall +([\d.]+) s CPU  \(beside the steps\)$", out, re.M)
    assert step_cpu and beside_cpu, out
    assert float(step_cpu[1]) < 0.3 and float(beside_cpu[1]) >= 0.6, out
    whole = re.search(r"^ci: whole run: [\d.]+ s wall, ([\d.]+) s CPU", out, re.M)
    assert whole and float(whole[1]) >= 0.6, out


def test_a_run_that_ends_early_stops_the_work_beside_it(tmp_path):
    steps = "beside slow bash -c 'sleep 3; touch late'\nstep bash -c 'exit 2'\n"
    result = _run(tmp_path, steps, whole_run_budget=100)
    assert result.returncode == 2
    time.sleep(4)
    assert not (tmp_path / "late").exists(), "the work beside the run outlived it"
