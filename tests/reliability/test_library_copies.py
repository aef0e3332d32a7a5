"""library_copies: two copies of a library that crash a process at exit are named before it ends, as the environment."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from kvconform.conformance.reliability.library_copies import (
    EXIT_CLASHES,
    MAY_CRASH_AT_EXIT,
    copies_notes,
    loaded_libraries,
)
from tests.suite_run import run_suite

WHEEL_LIBS = "/venv/lib/python3.11/site-packages/nixl_cu12.libs"
MAPS = "\n".join(f"7f00-7f01 r-xp 00000000 08:01 {inode} {path}" for inode, path in enumerate([
    "/usr/lib/x86_64-linux-gnu/libnl-route-3.so.200.26.0",
    f"{WHEEL_LIBS}/libnl-route-3-3ad497a3.so.200.26.0",
    f"{WHEEL_LIBS}/libnl-route-3-3ad497a3.so.200.26.0",  # a library maps several segments: one file
    "/usr/lib/x86_64-linux-gnu/libssl.so.3",  # two copies of a library that does not clash: not reported
    "/venv/lib/python3.11/site-packages/opencv_python_headless.libs/libssl-81259c47.so.1.1.1k",
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
])) + "\n7f02-7f03 rw-p 00000000 00:00 0 [heap]\n7f04-7f05 rw-p 00000000 00:00 0\n"


def test_the_copies_of_a_library_are_found_by_its_name_without_auditwheels_hash():
    found = loaded_libraries(MAPS)
    assert found["libnl-route-3"] == {"/usr/lib/x86_64-linux-gnu/libnl-route-3.so.200.26.0",
                                      f"{WHEEL_LIBS}/libnl-route-3-3ad497a3.so.200.26.0"}
    assert len(found["libssl"]) == 2 and found["libc"] == {"/usr/lib/x86_64-linux-gnu/libc.so.6"}


def test_only_a_known_clash_is_reported_in_one_line_naming_both_files():
    (note,) = copies_notes(MAPS)
    assert note.startswith("environment: libnl-route-3 is loaded from 2 files (/usr/lib/x86_64-linux-gnu/"
                           f"libnl-route-3.so.200.26.0, {WHEEL_LIBS}/libnl-route-3-3ad497a3.so.200.26.0): ")
    assert EXIT_CLASHES["libnl-route-3"] in note and MAY_CRASH_AT_EXIT in note and "\n" not in note
    assert note.endswith("so this process may end with SIGSEGV (-11) after every result is written; a packaging "
                         "clash, not a connector's failure")
    one_copy = "\n".join(line for line in MAPS.splitlines() if "nixl_cu12.libs" not in line)
    assert copies_notes(one_copy) == []


def _system_libnl() -> list[Path]:
    return sorted(Path("/usr/lib").rglob("libnl-route-3.so*"))


@pytest.mark.skipif(not _system_libnl(), reason="no system libnl-route-3 under /usr/lib: NIXL's bundled copy "
                    "is the only one loaded here, so no clash to find")
def test_a_serial_nixl_run_names_the_clash_in_its_output_and_its_results(tmp_path):
    results = tmp_path / "results.json"
    status, outcomes, output = run_suite(tmp_path, ["--connector", "NixlConnector", "-k", "test_roundtrip and float32",
                                                    f"--kvconform-json={results}"])
    assert outcomes and all(o.outcome == "passed" for o in outcomes) and status == 0, output[-3000:]
    (run,) = json.loads(results.read_text())["runs"]
    assert [n for n in run["environment_notes"] if n.startswith("environment: libnl-route-3 is loaded from 2")]
    assert "kvconform: environment: libnl-route-3 is loaded from 2 files" in output


def test_a_crash_at_exit_without_the_note_stays_a_crash():
    from tests.suite_run import pytest_status

    assert pytest_status(-signal.SIGSEGV, False, "2 passed") == -signal.SIGSEGV
    assert pytest_status(-signal.SIGSEGV, False, f"kvconform: environment: ... {MAY_CRASH_AT_EXIT}") == 0
    assert pytest_status(-signal.SIGSEGV, True, MAY_CRASH_AT_EXIT) == 1
