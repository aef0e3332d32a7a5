"""Reading JUnit XML and kvconform JSON into one model; bad input is one clear line."""

from __future__ import annotations

import json

import pytest

from kvconform.reports.matrix import build_matrix
from kvconform.reports.readers import ReportInputError, read, read_all
from kvconform.reports.render_terminal import run_line
from tests.reports.samples import CPU_WITH_PROPERTIES, CUDA_PLAIN


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _by_nodeid(results):
    return {t.nodeid: t for t in results.tests}


def test_junit_with_properties_takes_the_identity_from_them(tmp_path):
    results, kind = read(_file(tmp_path, "junit-cpu.xml", CPU_WITH_PROPERTIES))
    assert kind == "junit"
    tests = _by_nodeid(results)
    ok = tests["conformance/test_roundtrip.py::test_roundtrip[cpu-CPU_ATTN-ExampleConnector-float16-bs16]"]
    assert (ok.check, ok.platform, ok.backend, ok.connector, ok.variant, ok.outcome, ok.duration) == (
        "roundtrip", "cpu", "CPU_ATTN", "ExampleConnector", "float16-bs16", "passed", 1.5)
    assert ok.params == {"dtype": "float16"}
    known = tests["conformance/test_roundtrip.py::test_roundtrip[cpu-CPU_ATTN-ExampleConnector-aligned-extend]"]
    assert known.outcome == "xfailed"
    assert known.expected.where == "conformance/expectations/cpu.yaml:13"
    assert known.expected.link == "https://github.com/vllm-project/vllm/issues"
    assert known.expected.finding_class == "bug"  # the JUnit property kvconform.expect.class
    lint = tests["conformance/test_lint.py::test_lint[cpu-ExampleConnector]"]
    # a message that ends in a colon only introduces its cause: the cause's first line is kept with it
    assert lint.message == ("ExampleConnector: 1 lint error(s) in /v/example_connector.py: "
                            "example_connector.py:190: KVC001 error: .cuda() hard-codes the device")
    engine = tests["conformance/test_engine.py::test_engine_generates[cpu-CPU_ATTN]"]
    assert (engine.check, engine.connector, engine.outcome) == ("engine", "ExampleConnector", "failed")
    assert engine.message == "AssertionError: second run computed 0 tokens from the connector"
    assert "def test_engine" in engine.details
    # only the check was recorded: the rest is parsed from the id; the class stays in the node id
    contract = tests["conformance/test_contract.py::TestScheduler::test_claim[cpu-CPU_ATTN-DecodeBenchConnector]"]
    assert (contract.check, contract.platform, contract.backend, contract.connector, contract.outcome,
            contract.message) == ("contract", "cpu", "CPU_ATTN", "DecodeBenchConnector", "skipped",
                                  "needs two devices")
    (run,) = results.runs
    assert (run.platform, run.started, run.duration) == ("cpu", "2026-01-02T03:04:05+00:00", 12.5)
    assert results.totals == {"failed": 2, "xfailed": 1, "passed": 1, "skipped": 1}


def test_junit_without_properties_parses_platform_backend_connector_and_check_from_ids(tmp_path):
    results, _ = read(_file(tmp_path, "junit-cuda.xml", CUDA_PLAIN))
    rows = {(t.check, t.platform, t.backend, t.connector, t.variant, t.outcome) for t in results.tests}
    assert rows == {
        ("roundtrip", "cuda", "FLASH_ATTN", "ExampleConnector", "float16-bs16", "passed"),
        ("roundtrip", "cuda", "FLASH_ATTN", "NixlConnector", "float16-bs16", "failed"),  # failure + teardown error
        ("fill", "cuda", "TRITON_ATTN", "DecodeBenchConnector", "tuple", "error"),
        ("lint", "cuda", "-", "ExampleConnector", "", "passed"),  # no platform id: the run's platform
        ("collection", "cuda", "-", "-", "", "error"),
    }
    assert results.runs[0].platform == "cuda"  # the <testsuite> root alone is accepted
    broken = _by_nodeid(results)["conformance.test_broken"]
    assert broken.message == "ImportError: cannot import name 'gone'"


def test_several_runs_merge_into_one_matrix(tmp_path):
    results = read_all([_file(tmp_path, "cpu.xml", CPU_WITH_PROPERTIES), _file(tmp_path, "cuda.xml", CUDA_PLAIN)])
    assert [r.id for r in results.runs] == ["cpu", "cuda"]
    assert len(results.tests) == 10
    assert {t.run for t in results.tests} == {"cpu", "cuda"}
    cells = {(c.platform, c.connector, c.check): (c.status, c.counts) for c in results.cells}
    assert cells[("cuda", "NixlConnector", "roundtrip")] == ("failed", {"failed": 1})
    assert cells[("cpu", "ExampleConnector", "roundtrip")] == ("xfailed", {"xfailed": 1, "passed": 1})


def test_json_results_win_over_the_junit_of_the_same_run(tmp_path):
    junit = _file(tmp_path, "cpu.xml", CPU_WITH_PROPERTIES)
    from_junit, _ = read(junit)
    data = from_junit.to_json()
    data["runs"][0].update(id="cpu", vllm="0.32.0", source=None)
    for test in data["tests"]:
        test["run"] = "cpu"
        test["message"] = "from json: " + test["message"]
    as_json = _file(tmp_path, "cpu.json", json.dumps(data))
    for order in ([junit, as_json], [as_json, junit]):
        merged = read_all(order)
        assert [r.vllm for r in merged.runs] == ["0.32.0"]  # the JUnit twin is dropped
        assert all(t.message.startswith("from json: ") for t in merged.tests)
        assert len(merged.tests) == 5
        assert merged.runs[0].source == str(as_json)
        assert [r.id for r in merged.runs] == ["cpu"] and {t.run for t in merged.tests} == {"cpu"}


def test_two_runs_of_one_platform_get_distinct_ids(tmp_path):
    first = _file(tmp_path, "a.xml", CUDA_PLAIN)
    second = _file(tmp_path, "b.xml", CUDA_PLAIN.replace("float16-bs16", "bfloat16-bs32"))
    results = read_all([first, second])
    assert [r.id for r in results.runs] == ["cuda", "cuda#2"]
    assert {t.run for t in results.tests if "bfloat16" in t.nodeid} == {"cuda#2"}


def _on_vllm(junit: str, version: str) -> str:
    """The sample run as recorded on vLLM ``version``: the suite property results_json.py writes."""
    recorded = f'<properties><property name="kvconform.run.vllm" value="{version}"/></properties>'
    return junit.replace('hostname="ci">', 'hostname="ci">' + recorded, 1)


def test_runs_of_one_platform_on_two_vllm_releases_keep_a_column_each(tmp_path):
    old = _file(tmp_path, "cpu-032.xml", _on_vllm(CPU_WITH_PROPERTIES, "0.32.0"))
    new = _file(tmp_path, "cpu-033.xml", _on_vllm(CPU_WITH_PROPERTIES, "0.33.0"))
    results = read_all([new, _file(tmp_path, "cuda.xml", CUDA_PLAIN), old])
    columns = ["cpu (vLLM 0.32.0)", "cpu (vLLM 0.33.0)"]
    assert sorted((r.id, r.platform, r.vllm) for r in results.runs if r.vllm) == [(c, c, c[-7:-1]) for c in columns]
    assert len(results.tests) == 15  # 5 per run: neither cpu run replaced the other's tests
    assert {t.platform for t in results.tests} == {"cuda", *columns}
    cells = {(c.platform, c.connector, c.check): c.counts for c in results.cells}
    assert all(cells[(c, "ExampleConnector", "roundtrip")] == {"xfailed": 1, "passed": 1} for c in columns)
    assert build_matrix(results).platforms == ["cuda", *columns]  # the platform table's order, then the release
    assert run_line(columns[1], results.runs).startswith("cpu (vLLM 0.33.0): vLLM 0.33.0")


def test_runs_on_one_vllm_release_share_the_platform_column(tmp_path):
    twice = [_file(tmp_path, f"{n}.xml", _on_vllm(CPU_WITH_PROPERTIES, "0.33.0")) for n in ("a", "b")]
    results = read_all(twice)
    assert {t.platform for t in results.tests} == {"cpu"} and len(results.tests) == 5


BAD_INPUTS = {
    "missing": (None, "no such file"),
    "folder": ("<dir>", "is a folder"),
    "empty": ("  \n", "empty file"),
    "binary": (b"\xff\xfe\x00<", "not a text file"),
    "malformed-xml": ("<testsuites><testsuite>", "not well-formed XML"),
    "not-junit": ("<html><body>hi</body></html>", "not a JUnit XML file (root element <html>"),
    "neither": ("name,outcome\n", "neither JUnit XML nor kvconform JSON"),
    "malformed-json": ('{"format": ', "not valid JSON"),
    "foreign-json": ('{"tests": []}', "not kvconform results"),
    "bad-json-field": ('{"format": "kvconform-results", "version": 1, "runs": [], "tests": [{"run": "x"}]}',
                       "tests.0.nodeid: Field required"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_naming_the_file(tmp_path, case):
    content, message = BAD_INPUTS[case]
    path = tmp_path / "input"
    if content == "<dir>":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ReportInputError) as info:
        read(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text
