"""``kvconform platforms`` and the pytest options, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvconform.conformance import cli
from tests.load import stretched


def _pytest(tmp_path: Path, *args: str, test: str = "def test_nothing(platform):\n    assert platform.name\n"):
    (tmp_path / "test_probe.py").write_text(test)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=stretched(120))


def test_platforms_json_reports_cpu_only(capsys):
    assert cli.main(["platforms", "--json", "--no-vllm"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"cuda", "rocm", "xpu", "cpu"}
    for row in rows.values():
        assert {"name", "detected", "reason", "device_count", "backends"} <= set(row)
        assert row["reason"]
    assert rows["cpu"]["detected"] and rows["cpu"]["device_count"] == 1
    assert not any(rows[n]["detected"] for n in ("cuda", "rocm", "xpu"))
    assert [b["name"] for b in rows["cpu"]["backends"]] == ["CPU_ATTN"]


def test_platforms_table_confirms_backends_with_vllm(capsys):
    assert cli.main(["platforms"]) == 0
    out = capsys.readouterr().out
    assert "cpu: detected" in out and "xpu: not detected" in out
    assert "[ok] CPU_ATTN" in out  # vLLM's registry confirms the CPU backend here


def test_platform_option_in_header(tmp_path):
    result = _pytest(tmp_path, "--platform=cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kvconform: platform cpu" in result.stdout
    assert "kvconform: attention backends CPU_ATTN" in result.stdout
    assert "test_nothing[cpu]" in _pytest(tmp_path, "--platform=cpu", "--collect-only", "-q").stdout


def test_bogus_platform_is_a_usage_error_listing_choices(tmp_path):
    result = _pytest(tmp_path, "--platform=bogus")
    assert result.returncode == 4
    assert "unknown platform 'bogus': choose one of: auto, cuda, rocm, xpu, cpu" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_misspelt_platform_gets_a_suggestion(tmp_path):
    result = _pytest(tmp_path, "--platform=cdua")
    assert result.returncode == 4
    assert "argument --platform: unknown platform 'cdua': did you mean cuda? (choose one of:" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_misspelt_connector_gets_a_suggestion_not_every_name(tmp_path):
    result = _pytest(tmp_path, "--platform=cpu", "--connector", "ExampleConector")
    assert result.returncode == 4
    assert "ERROR: unknown connector 'ExampleConector': did you mean ExampleConnector?" in result.stderr
    assert "LMCacheMPConnector" not in result.stderr and "Traceback" not in result.stderr


def test_absent_xpu_fails_fast_with_one_line(tmp_path):
    result = _pytest(tmp_path, "--platform=xpu", test="raise SystemExit('collection must not be reached')\n")
    assert result.returncode == 4
    assert ("--platform=xpu was requested but no xpu device is usable: torch.xpu.is_available() is False "
            "and intel_extension_for_pytorch is not installed") in result.stderr
    assert "collection must not be reached" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_backend_the_platform_cannot_use(tmp_path):
    result = _pytest(tmp_path, "--platform=cpu", "--attn-backend", "FLASH_ATTN")
    assert result.returncode == 4
    assert "FLASH_ATTN cannot serve KV connectors on cpu; choose from: CPU_ATTN" in result.stderr


def test_unknown_connector_lists_known_ones(tmp_path):
    result = _pytest(tmp_path, "--platform=cpu", "--connector", "NoSuchConnector")
    assert result.returncode == 4
    assert "unknown connector 'NoSuchConnector'; known connectors:" in result.stderr
    assert "ExampleConnector" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("spec,words", [
    ("no_such_module_xyz:Thing", "module 'no_such_module_xyz' does not import"),
    ("json:JSONDecoder", "JSONDecoder is not a KV connector"),
    ("json:Nope", "has no attribute 'Nope'"),
])
def test_bad_third_party_connector(spec, words):
    """The same ConnectorSpecError the plugin turns into a one-line usage error (shown above)."""
    from kvconform.conformance.connectors.selection import ConnectorSpecError, resolve_connectors

    with pytest.raises(ConnectorSpecError, match=words.replace("(", r"\(")):
        resolve_connectors([spec])


def test_plugin_works_installed_from_elsewhere(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                             "--pyargs", "kvconform.conformance", "--platform=cpu", "--collect-only", "-q",
                             "--connector", "ExampleConnector",
                             "-k", "test_roundtrip and float16"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=stretched(180))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "test_roundtrip[cpu-CPU_ATTN-ExampleConnector-float16]" in result.stdout
