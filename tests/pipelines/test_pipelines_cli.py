"""``kvconform pipeline`` through the real entry point: output, and bad input as one line."""

from __future__ import annotations

import re

import pytest
import yaml

from kvconform.conformance.cli import main
from kvconform.pipelines.generate import build_pipeline, render_yaml


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize("target", ["cuda", "rocm", "xpu", "cpu", "all"])
def test_prints_the_pipeline(target, capsys):
    assert main(["pipeline", "--platform", target]) == 0
    out = capsys.readouterr().out
    assert out == render_yaml(build_pipeline([target]))
    assert yaml.safe_load(out)["steps"]


def test_writes_the_pipeline_and_restricts_connectors(tmp_path, capsys):
    out = tmp_path / "pipeline.yml"
    assert main(["pipeline", "--platform", "xpu", "--connector", "ExampleConnector", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert out.read_text() == render_yaml(build_pipeline(["xpu"], ["ExampleConnector"]))


def test_unknown_platform_is_refused_by_argparse(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["pipeline", "--platform", "tpu"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "argument --platform: invalid choice: 'tpu'" in captured.err.strip().splitlines()[-1]


def test_typo_in_the_config_is_one_line_naming_file_line_and_key(tmp_path, capsys, shipped_lanes):
    shipped_lanes = dict(shipped_lanes)
    text = yaml.safe_dump(shipped_lanes, sort_keys=False).replace("  xpu:\n    platform: xpu\n    agents:",
                                                                   "  xpu:\n    platform: xpu\n    agnets:")
    assert "agnets" in text
    config = tmp_path / "lanes.yaml"
    config.write_text(text)
    assert main(["pipeline", "--platform", "xpu", "--config", str(config)]) == 2
    line = _one_error_line(capsys)
    match = re.match(rf"^kvconform pipeline: error: {re.escape(str(config))}:(\d+): lanes\.xpu\.agnets: "
                     r"Extra inputs are not permitted$", line)
    assert match, line
    assert "agnets:" in text.splitlines()[int(match.group(1)) - 1]


@pytest.mark.parametrize("content, pattern", [
    (None, r"cannot read: No such file or directory$"),
    ("lanes: [\n", r":\d+: not valid YAML"),
    ("- just\n- a list\n", r"Input should be a valid dictionary"),
])
def test_unusable_config_is_one_line(content, pattern, tmp_path, capsys):
    config = tmp_path / "lanes.yaml"
    if content is not None:
        config.write_text(content)
    assert main(["pipeline", "--platform", "cpu", "--config", str(config)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"kvconform pipeline: error: {config}")
    assert re.search(pattern, line), line


def test_output_in_a_missing_directory_is_one_line(tmp_path, capsys):
    target = tmp_path / "no" / "such" / "pipeline.yml"
    assert main(["pipeline", "--platform", "cpu", "-o", str(target)]) == 2
    line = _one_error_line(capsys)
    assert line == f"kvconform pipeline: error: cannot write {target}: directory {target.parent} does not exist"
    assert not target.parent.exists()


def test_output_onto_a_directory_is_one_line(tmp_path, capsys):
    assert main(["pipeline", "--platform", "cpu", "-o", str(tmp_path)]) == 2
    assert _one_error_line(capsys).startswith(f"kvconform pipeline: error: cannot write {tmp_path}: ")


def test_unknown_connector_is_one_line(capsys):
    assert main(["pipeline", "--platform", "xpu", "--connector", "NoSuch"]) == 2
    assert "NoSuch is in no connector group and names no connector" in _one_error_line(capsys)
