"""The release report (``kvconform report --releases``): one run per vLLM release, a column each, changes marked.

Synthetic runs of four releases, as the plugin writes them (JUnit with kvconform's run and test properties, or
``--kvconform-json``): the vLLM axis and its order, which rows differ and which are missing from a release (listed,
never counted as a change), the tests behind a change, every output, and the bad-input lines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from kvconform.reports.readers import ReportInputError, read_all
from kvconform.reports.release_matrix import build_release_matrix, summary, to_json
from kvconform.reports.releases import read_releases

CASE = """<testcase classname="conformance.test_{check}" name="test_{check}[cpu-CPU_ATTN-{connector}-{variant}]"
 time="0.1"><properties><property name="kvconform.check" value="{check}"/>
 <property name="kvconform.platform" value="cpu"/><property name="kvconform.backend" value="CPU_ATTN"/>
 <property name="kvconform.connector" value="{connector}"/><property name="kvconform.variant" value="{variant}"/>
 </properties>{body}</testcase>"""
BODIES = {
    "passed": "",
    "failed": '<failure message="AssertionError: loaded 0 bytes">E   AssertionError: loaded 0 bytes</failure>',
    "xfailed": '<skipped type="pytest.xfail" message="known bug">known bug</skipped>',
    "skipped": '<skipped type="pytest.skip" message="needs two devices">needs two devices</skipped>',
    "not run": '<skipped type="pytest.skip" message="not run: could not be constructed">x</skipped>',
}

# (check, connector, variant) -> outcome, on the oldest release; each release below changes some of it
BASE = {
    ("roundtrip", "ExampleConnector", "f16"): "passed",
    ("roundtrip", "ExampleConnector", "f32"): "passed",
    ("lint", "ExampleConnector", "src"): "passed",
    ("fill", "DecodeBenchConnector", "tuple"): "xfailed",
    ("roundtrip", "OffloadingConnector", "f16"): "skipped",
}
RELEASES = {
    "0.31.0": BASE,
    "0.32.0": BASE,
    # a roundtrip test fails: the row changes (its other test still passes)
    "0.33.0": {**BASE, ("roundtrip", "ExampleConnector", "f32"): "failed"},
    # the failure stays; DecodeBench's known bug is fixed; a connector only this release registers
    "0.34.0": {**BASE, ("roundtrip", "ExampleConnector", "f32"): "failed",
               ("fill", "DecodeBenchConnector", "tuple"): "passed", ("lint", "UMBPStoreConnector", "src"): "passed"},
}


def junit(cases: dict[tuple[str, str, str], str], vllm: str | None = None) -> str:
    recorded = f'<properties><property name="kvconform.run.vllm" value="{vllm}"/></properties>' if vllm else ""
    body = "".join(CASE.format(check=check, connector=connector, variant=variant, body=BODIES[outcome])
                   for (check, connector, variant), outcome in cases.items())
    return (f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{recorded}{body}'
            "</testsuite></testsuites>")


@pytest.fixture
def runs(tmp_path):
    """release -> its run's JUnit file, written newest first (the report orders them by version, not by input)."""
    paths = {}
    for release, cases in reversed(RELEASES.items()):
        path = tmp_path / f"junit-{release}.xml"
        path.write_text(junit(cases, release))
        paths[release] = path
    return paths


def _rows(matrix):
    return {(row.connector, row.check): row for row in matrix.rows}


def test_a_column_per_release_oldest_first(runs):
    matrix = build_release_matrix(read_releases(str(path) for path in runs.values()))
    assert matrix.labels == ["0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    assert matrix.platforms == ["cpu"]
    row = _rows(matrix)[("ExampleConnector", "roundtrip")]
    assert [row.state(label) for label in matrix.labels] == ["passed", "passed", "failed", "failed"]


def test_a_row_differs_where_its_worst_outcome_differs_between_any_two_releases(runs):
    rows = _rows(build_release_matrix(read_releases(map(str, runs.values()))))
    assert rows[("ExampleConnector", "roundtrip")].differs
    assert rows[("DecodeBenchConnector", "fill")].differs  # xfailed until 0.34.0, passed there
    assert not rows[("ExampleConnector", "lint")].differs
    assert not rows[("OffloadingConnector", "roundtrip")].differs  # skipped on every release


def test_a_row_a_release_lacks_is_missing_there_not_a_change(runs):
    matrix = build_release_matrix(read_releases(map(str, runs.values())))
    row = _rows(matrix)[("UMBPStoreConnector", "lint")]
    assert row.missing_from == ["0.31.0", "0.32.0", "0.33.0"] and not row.differs
    assert row.states_text() == "0.31.0 missing, 0.32.0 missing, 0.33.0 missing, 0.34.0 PASS"
    assert [r.connector for r in matrix.missing()] == ["UMBPStoreConnector"]
    assert summary(matrix) == ("vLLM 0.31.0, 0.32.0, 0.33.0, 0.34.0; cpu: 2 of 5 connector x check rows differ "
                               "between releases, 1 missing from some")


def test_a_changed_row_names_the_tests_behind_it_across_every_release(runs):
    row = _rows(build_release_matrix(read_releases(map(str, runs.values()))))[("ExampleConnector", "roundtrip")]
    assert row.changed_tests == ["test_roundtrip.py::test_roundtrip[cpu-CPU_ATTN-ExampleConnector-f32]: "
                                 "0.31.0 passed, 0.32.0 passed, 0.33.0 failed, 0.34.0 failed"]


def test_a_cell_whose_tests_could_not_start_is_not_run_and_differs_from_a_plain_skip(tmp_path):
    key = ("roundtrip", "OffloadingConnector", "f16")
    (tmp_path / "a.xml").write_text(junit({key: "skipped"}, "0.33.0"))
    (tmp_path / "b.xml").write_text(junit({key: "not run"}, "0.34.0"))
    row = build_release_matrix(read_releases([str(tmp_path / "a.xml"), str(tmp_path / "b.xml")])).rows[0]
    assert (row.state("0.33.0"), row.state("0.34.0"), row.differs) == ("skipped", "not run", True)


def test_a_file_that_records_no_vllm_is_named_by_its_label(tmp_path):
    plain = tmp_path / "plain.xml"
    plain.write_text(junit(BASE))
    (tmp_path / "b.xml").write_text(junit(BASE, "0.32.0"))
    with pytest.raises(ReportInputError, match=r"plain.xml: does not record the vLLM it ran on: name its release, "
                                               r"e.g. 0.32.0="):
        read_releases([str(plain)])
    runs = read_releases([f"0.33.1.dev4={plain}", str(tmp_path / "b.xml")])
    assert [run.label for run in runs] == ["0.32.0", "0.33.1.dev4"]


def test_a_label_names_two_runs_of_one_version_apart_but_cannot_rename_a_version(tmp_path):
    (tmp_path / "a.xml").write_text(junit(BASE, "0.33.0"))
    (tmp_path / "b.xml").write_text(junit(BASE, "0.33.0"))
    with pytest.raises(ReportInputError, match=r"a.xml and .*b.xml are both runs of vLLM 0.33.0 \(5 tests in both, "
                                               r"e.g. test_fill.py::test_fill\[cpu-CPU_ATTN-DecodeBenchConnector-"
                                               r"tuple\] on cpu\): give one run per release"):
        read_releases([str(tmp_path / "a.xml"), str(tmp_path / "b.xml")])
    runs = read_releases([str(tmp_path / "a.xml"), f"0.33.0-wheel={tmp_path / 'b.xml'}"])
    assert [run.label for run in runs] == ["0.33.0", "0.33.0-wheel"]  # not all versions: in the order given
    with pytest.raises(ReportInputError, match=r"b.xml: records vLLM 0.33.0, not 0.32.0"):
        read_releases([f"0.32.0={tmp_path / 'b.xml'}"])


def test_a_run_that_ran_no_test_is_a_release_whose_rows_are_all_missing(tmp_path, runs):
    stopped = tmp_path / "stopped.xml"  # a run that stopped before its first test (vLLM refused the platform)
    stopped.write_text(junit({}, "0.35.0"))
    matrix = build_release_matrix(read_releases([str(runs["0.34.0"]), str(stopped)]))
    assert all(row.missing_from == ["0.35.0"] and not row.differs for row in matrix.rows)
    assert matrix.releases[1].facts() == "vLLM 0.35.0: no tests ran; no tests"


def test_files_of_one_release_that_share_no_test_are_parts_of_its_run(tmp_path, runs):
    """A pipeline uploads a JUnit file per connector group and platform: together they are the release's run."""
    reference = {key: outcome for key, outcome in BASE.items() if key[1] != "OffloadingConnector"}
    offloading = {key: outcome for key, outcome in BASE.items() if key[1] == "OffloadingConnector"}
    (tmp_path / "reference.xml").write_text(junit(reference, "0.33.0"))
    (tmp_path / "offloading.xml").write_text(junit(offloading, "0.33.0"))
    matrix = build_release_matrix(read_releases([str(runs["0.32.0"]), str(tmp_path / "reference.xml"),
                                                 str(tmp_path / "offloading.xml")]))
    assert matrix.labels == ["0.32.0", "0.33.0"] and not matrix.differing() and not matrix.missing()
    assert matrix.releases[1].source.endswith("reference.xml, " + str(tmp_path / "offloading.xml"))
    (tmp_path / "other.xml").write_text(junit(offloading, "0.33.1"))
    with pytest.raises(ReportInputError, match=r"named nightly, yet they record several vLLM versions "
                                               r"\(0.33.0, 0.33.1\)"):
        read_releases([f"nightly={tmp_path / 'reference.xml'}", f"nightly={tmp_path / 'other.xml'}"])


def test_a_file_that_is_not_one_run_of_one_release_is_refused(tmp_path, runs):
    nothing = tmp_path / "nothing.json"
    nothing.write_text(json.dumps({"format": "kvconform-results", "version": 1, "runs": [], "tests": []}))
    with pytest.raises(ReportInputError, match=r"nothing.json: records no run: not a run of the suite"):
        read_releases([str(nothing)])
    merged = tmp_path / "merged.json"  # a report's results.json over two releases
    merged.write_text(json.dumps(read_all([runs["0.31.0"], runs["0.32.0"]]).to_json()))
    with pytest.raises(ReportInputError, match=r"merged.json: holds runs of several vLLM releases \(0.31.0, 0.32.0\)"):
        read_releases([str(merged)])
    with pytest.raises(ReportInputError, match=r"=x.xml: an empty release label"):
        read_releases(["=x.xml"])


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.classes = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
            self.classes.append(dict(attrs).get("class"))

    def handle_data(self, data):
        if self.rows and data.strip():
            self.rows[-1].append(data.strip())


def report(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kvconform", "report", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


def test_cli_writes_every_output_and_prints_what_changed(tmp_path, runs):
    out = tmp_path / "releases"
    done = report("--releases", *runs.values(), "--out", out, "--print-matrix")
    assert done.returncode == 0, done.stdout + done.stderr  # written: what changed is the report, not a failure
    lines = done.stdout.splitlines()
    assert "differs: cpu ExampleConnector roundtrip: 0.31.0 PASS, 0.32.0 PASS, 0.33.0 FAIL, 0.34.0 FAIL" in lines
    assert ("missing: cpu UMBPStoreConnector lint: 0.31.0 missing, 0.32.0 missing, 0.33.0 missing, 0.34.0 PASS"
            in lines)
    header = next(line for line in lines if line.strip().startswith("connector"))
    assert header.split() == ["connector", "check", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    assert next(line for line in lines if "ExampleConnector" in line and "roundtrip" in line).split() == \
        ["*", "ExampleConnector", "roundtrip", "PASS", "PASS", "FAIL", "FAIL"]
    assert next(line for line in lines if "ExampleConnector" in line and "lint" in line).split()[0] != "*"
    assert lines[-1].startswith("kvconform report: release report, vLLM 0.31.0, 0.32.0, 0.33.0, 0.34.0; cpu: 2 of 5")

    data = json.loads((out / "releases.json").read_text())
    assert data["format"] == "kvconform-releases" and [r["label"] for r in data["releases"]] == \
        ["0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    assert data["platforms"] == [{"platform": "cpu", "rows": 5, "differ": 2, "missing": 1}]
    umbp = next(r for r in data["rows"] if r["connector"] == "UMBPStoreConnector")
    assert umbp["releases"]["0.31.0"] is None and umbp["releases"]["0.34.0"]["state"] == "passed"
    assert to_json(build_release_matrix(read_releases(map(str, runs.values())))) == data

    markdown = (out / "summary.md").read_text()
    changed = markdown.split("### cpu: what changed (2)")[1].split("###")[0]
    assert ("| ExampleConnector | roundtrip | **PASS** 2 passed | **PASS** 2 passed | **FAIL** 1 failed · 1 passed | "
            "**FAIL** 1 failed · 1 passed |") in changed
    assert "UMBPStoreConnector" not in changed and "| **changed** | ExampleConnector | roundtrip |" in markdown

    page = _Text()
    page.feed((out / "index.html").read_text())
    marked = {tuple(row[:2]): cls for row, cls in zip(page.rows, page.classes, strict=True) if row}
    assert marked[("ExampleConnector", "roundtrip")] == "differs"
    assert marked[("UMBPStoreConnector", "lint")] == "missing"
    assert marked[("ExampleConnector", "lint")] == "same"


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, runs):
    twice = report("--releases", runs["0.32.0"], runs["0.32.0"], "--out", tmp_path / "o")
    assert twice.returncode == 2 and "are both runs of vLLM 0.32.0" in twice.stderr, twice.stderr
    not_results = tmp_path / "notes.txt"
    not_results.write_text("hello")
    bad = report("--releases", runs["0.32.0"], not_results, "--out", tmp_path / "o")
    assert bad.returncode == 2 and "notes.txt: neither JUnit XML nor kvconform JSON" in bad.stderr, bad.stderr
    no_out = report("--releases", runs["0.32.0"])
    assert no_out.returncode == 2 and "--releases needs --out DIR" in no_out.stderr
    mixed = report("--releases", runs["0.32.0"], "--out", tmp_path / "o", "--coverage-floor", tmp_path / "f.yaml")
    assert mixed.returncode == 2 and "--coverage-floor: a run report's option" in mixed.stderr
    for done in (twice, bad, no_out, mixed):
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_test_text_is_inert_in_every_output(tmp_path):
    evil = "Evil&lt;script&gt;alert(1)&lt;/script&gt;"  # as JUnit escapes it: <script> once read
    (tmp_path / "a.xml").write_text(junit({("fill", evil, "x"): "passed"}, "0.33.0"))
    (tmp_path / "b.xml").write_text(junit({("fill", evil, "x"): "failed"}, "0.34.0"))
    done = report("--releases", tmp_path / "a.xml", tmp_path / "b.xml", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    page, markdown = (tmp_path / "out" / "index.html").read_text(), (tmp_path / "out" / "summary.md").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page  # the changed test's id too
    assert "<script>alert" not in markdown
