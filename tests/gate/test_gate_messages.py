"""The gate's verdict lines end in what went wrong: a failure whose message ends in a colon gets the line that
says why, or "(no output)" when there is none (the engine's stderr was empty), never a bare colon. And each test
is attributed to the selected connector it ran, a profile variant's id with a dash in it included."""

from __future__ import annotations

import pytest

from kvconform.pipelines.gate.results import read_results

ID = "test_engine_generates[cpu-CPU_ATTN-ExampleConnector]"
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="1">
 <testcase classname="test_engine" name="{id}">{properties}<failure message="{message}">trace</failure></testcase>
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
    path.write_text(JUNIT.format(id=ID, properties="", message=message))
    (result,) = read_results(path, ["ExampleConnector"], "cpu")
    assert (result.connector, result.outcome, result.message) == ("ExampleConnector", "failed", line)
    assert result.junit_id == f"test_engine::{ID}"


@pytest.mark.parametrize("properties", [
    "",  # a JUnit file written without the suite's labels: the id is read against the selected connectors' ids
    '<properties><property name="kvconform.connector" value="NixlConnector"/></properties>',
])
def test_a_variant_with_a_dash_in_its_id_is_its_connectors(tmp_path, properties):
    path = tmp_path / "junit.xml"
    variant = "test_roundtrip[cuda-TRITON_ATTN-NixlConnector@device-buffer-float16]"
    path.write_text(JUNIT.format(id=variant, properties=properties, message="loaded bytes differ"))
    (result,) = read_results(path, ["ExampleConnector", "NixlConnector"], "cuda")
    assert (result.connector, result.check, result.outcome) == ("NixlConnector", "roundtrip", "failed")


def test_a_test_of_no_selected_connector_is_attributed_to_none(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT.format(id="test_roundtrip[cpu-CPU_ATTN-LMCacheConnectorV1-float16]", properties="",
                                 message="x"))
    (result,) = read_results(path, ["ExampleConnector", "NixlConnector"], "cpu")
    assert result.connector is None
