"""``kvconform compare``: two runs' outcomes, test id by test id, whatever folder each collected the suite from."""

from __future__ import annotations

import subprocess
import sys

from kvconform.reports.compare import differences, suite_id

CASE = '<testcase classname="{cls}" name="{name}" time="0.1"{body}'
PASSED, FAILED, SKIPPED = "/>", '><failure message="AssertionError: no">x</failure></testcase>', \
    '><skipped message="no device">x</skipped></testcase>'


def junit(cases: list[tuple[str, str, str]]) -> str:
    body = "".join(CASE.format(cls=cls, name=name, body=outcome) for cls, name, outcome in cases)
    return f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{body}</testsuite></testsuites>'


def test_ids_drop_the_folder_the_suite_was_collected_from():
    assert suite_id("conformance/test_fill.py::test_fill[cpu-X]") == "test_fill.py::test_fill[cpu-X]"
    assert suite_id("/opt/site-packages/kvconform/conformance/test_fill.py::test_fill[cpu-X]") == \
        "test_fill.py::test_fill[cpu-X]"


def test_each_differing_id_is_one_line():
    before = {"a": ["passed"], "b": ["failed"], "c": ["skipped"]}
    after = {"a": ["passed"], "b": ["passed"], "d": ["xfailed"]}
    assert differences(before, after, ("editable", "wheel")) == [
        "b: editable failed, wheel passed",
        "c: editable skipped, wheel did not run",
        "d: editable did not run, wheel xfailed",
    ]


def test_cli_exit_status_says_whether_runs_agree(tmp_path):
    one = tmp_path / "one.xml"
    two = tmp_path / "two.xml"
    same = tmp_path / "same.xml"
    one.write_text(junit([("conformance.test_fill", "test_fill[cpu-X]", PASSED),
                          ("conformance.test_lint", "test_lint[cpu-X]", SKIPPED)]))
    same.write_text(one.read_text())
    two.write_text(junit([("conformance.test_fill", "test_fill[cpu-X]", FAILED),
                          ("conformance.test_lint", "test_lint[cpu-X]", SKIPPED)]))

    def compare(*args):
        return subprocess.run([sys.executable, "-m", "kvconform", "compare", *map(str, args)],
                              capture_output=True, text=True, timeout=60)

    agree = compare(one, same)
    assert agree.returncode == 0 and "2 test ids, 0 differ" in agree.stdout, agree.stdout + agree.stderr
    differ = compare(one, two, "--labels", "0.33", "0.34")
    assert differ.returncode == 1, differ.stdout + differ.stderr
    assert differ.stdout.splitlines()[0].endswith(": 0.33 passed, 0.34 failed")
    missing = compare(one, tmp_path / "absent.xml")
    assert missing.returncode == 2 and "absent.xml" in missing.stderr and "Traceback" not in missing.stderr
