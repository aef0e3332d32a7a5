"""``kvconform lint``: exit statuses, output formats, rule selection and bad input."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvconform.conformance.cli import main
from kvconform.conformance.lint import paths
from tests.load import stretched

LOAD_PATH_WITH_CUDA = '''\
from safetensors.torch import load_file


def start_load_kv(self, filename, kv_cache_layer):
    kv_cache = load_file(filename)["kv_cache"].cuda()
    kv_cache_layer.copy_(kv_cache)
'''

MLA_ONLY = '''\
def is_mla(attn_metadata):
    return isinstance(attn_metadata, MLACommonMetadata)
'''


def _installed_example_connector() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        pytest.skip("vLLM is not installed")
    return Path(spec.submodule_search_locations[0], "distributed", "kv_transfer", "kv_connector", "v1",
                "example_connector.py")


@pytest.fixture
def load_path(tmp_path) -> Path:
    path = tmp_path / "connector.py"
    path.write_text(LOAD_PATH_WITH_CUDA)
    return path


def test_cuda_in_a_load_path_exits_1_and_names_the_line(load_path, capsys):
    assert main(["lint", str(load_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{load_path}:5:")
    assert " KVC001 error: " in lines[0] and "(fix: `.to(dst.device)`" in lines[0]
    assert lines[-1] == "1 file checked, 1 finding: 1 error, 0 warnings, 0 info (KVC001 1)"


def test_the_installed_example_connector_exits_0(capsys):
    example = _installed_example_connector()
    assert main(["lint", str(example)]) == 0
    out = capsys.readouterr().out
    assert " error: " not in out
    assert out.splitlines()[-1].startswith("1 file checked, ")


def test_warnings_alone_exit_0_and_are_printed(tmp_path, capsys):
    (tmp_path / "m.py").write_text(MLA_ONLY)
    assert main(["lint", str(tmp_path / "m.py")]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'm.py'}:2:38: KVC006 warning: " in out
    assert out.splitlines()[-1] == "1 file checked, 1 finding: 0 errors, 1 warning, 0 info (KVC006 1)"


def test_json_is_a_list_of_findings(load_path, capsys):
    assert main(["lint", "--json", str(load_path)]) == 1
    findings = json.loads(capsys.readouterr().out)
    assert findings == [{
        "path": str(load_path), "line": 5, "col": 48, "rule": "KVC001", "severity": "error",
        "message": findings[0]["message"], "fix": findings[0]["fix"],
        "function": "start_load_kv", "call": "load_file(filename)['kv_cache'].cuda",  # as ast.unparse writes it
    }]
    assert ".cuda()" in findings[0]["message"]


def test_json_of_a_clean_file_is_an_empty_list(tmp_path, capsys):
    (tmp_path / "clean.py").write_text("kv = kv_cpu.to(kv_cache_layer.device, non_blocking=True)\n")
    assert main(["lint", "--json", str(tmp_path / "clean.py")]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_folders_are_walked_for_python_files(tmp_path, capsys):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text(LOAD_PATH_WITH_CUDA)
    (tmp_path / "pkg" / "sub" / "b.py").write_text(MLA_ONLY)
    (tmp_path / "pkg" / "notes.txt").write_text("x.cuda()\n")
    assert main(["lint", str(tmp_path / "pkg")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out[:-1]] == [str(tmp_path / "pkg" / "a.py"),
                                                         str(tmp_path / "pkg" / "sub" / "b.py")]
    assert out[-1].startswith("2 files checked, 2 findings: 1 error, 1 warning, 0 info")


@pytest.mark.parametrize(("options", "status", "rules"), [
    (["--select", "KVC006"], 0, ["KVC006"]),
    (["--select", "kvc001,KVC006"], 1, ["KVC001", "KVC006"]),
    (["--ignore", "KVC001"], 0, ["KVC006"]),
    (["--ignore", "KVC001", "--ignore", "KVC006"], 0, []),
    (["--select", "KVC001,KVC006", "--ignore", "KVC006"], 1, ["KVC001"]),
])
def test_select_and_ignore_choose_rules_and_the_exit_status(tmp_path, capsys, options, status, rules):
    (tmp_path / "m.py").write_text(LOAD_PATH_WITH_CUDA + MLA_ONLY)
    assert main(["lint", "--json", *options, str(tmp_path / "m.py")]) == status
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)] == rules


def test_an_unparseable_file_is_a_finding(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("def start_load_kv(self:\n    pass\n")
    (tmp_path / "ok.py").write_text(LOAD_PATH_WITH_CUDA)
    assert main(["lint", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'broken.py'}:1:" in out and "KVC000 error: cannot check this file: syntax error" in out
    assert "KVC001" in out  # the other file is still checked


@pytest.mark.parametrize(("argv", "message"), [
    (["lint", "no/such/file.py"], "kvconform lint: error: no/such/file.py: no such file or directory"),
    (["lint", "--select", "KVC999"], "kvconform lint: error: --select: unknown rule KVC999; known rules: "),
    (["lint", "--ignore", "E501,KVC001"], "kvconform lint: error: --ignore: unknown rule E501; known rules: "),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(message)


def test_without_vllm_the_default_path_is_a_one_line_error(monkeypatch, capsys):
    monkeypatch.setattr(paths.importlib.util, "find_spec", lambda name: None)
    assert main(["lint"]) == 2
    assert capsys.readouterr().err == ("kvconform lint: error: vLLM is not installed here; "
                                       "name the files or folders to lint\n")


def test_the_default_path_is_vllms_connectors_found_without_importing_vllm():
    script = ("import sys, json\nfrom kvconform.conformance.cli import main\nstatus = main(['lint', '--json'])\n"
              "print(json.dumps({'status': status, 'vllm_imported': 'vllm' in sys.modules}), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=stretched(60))
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result["vllm_imported"] is False
    connectors = Path(importlib.util.find_spec("vllm").submodule_search_locations[0], "distributed",
                      "kv_transfer", "kv_connector")
    findings = json.loads(done.stdout)
    assert findings and all(Path(f["path"]).is_relative_to(connectors) for f in findings)
    assert result["status"] == (1 if any(f["severity"] == "error" for f in findings) else 0)
