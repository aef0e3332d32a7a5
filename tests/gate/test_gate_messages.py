"""The gate's verdict lines end in what went wrong: a failure whose message ends in a colon gets the line that
says why, or "(no output)" when there is none (the engine's stderr was empty), never a bare colon."""

from __future__ import annotations

import pytest

from kvconform.pipelines.gate_cli import read_junit

ID = "test_engine_generates[cpu-CPU_ATTN-ExampleConnector]"
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="1">
 <testcase classname="test_engine" name="{id}"><failure message="{message}">trace</failure></testcase>
</testsuite></testsuites>"""


@pytest.mark.parametrize("message, line", [
    ("AssertionError: the engine with ExampleConnector exited with status 1:&#10;",
     "AssertionError: the engine with ExampleConnector exited with status 1: (no output)"),
    ("AssertionError: the engine with ExampleConnector exited with status 1:&#10;INFO loading&#10;"
     "RuntimeError: no CPU kernels&#10;assert (1 == 0)",
     "AssertionError: the engine with ExampleConnector exited with status 1: RuntimeError: no CPU kernels"),
])
def test_a_failure_line_never_ends_in_a_bare_colon(tmp_path, message, line):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT.format(id=ID, message=message))
    (result,) = read_junit(path, ["ExampleConnector"])
    assert (result.connector, result.outcome, result.message) == ("ExampleConnector", "failed", line)
