"""The attention-backend axis: backends are confirmed through vLLM's registry when
the run starts, an unusable one skipped in vLLM's words, and MLA checks run once per MLA backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kvconform import platforms
from kvconform.conformance import plugin
from kvconform.platforms import vllm_backends
from tests.load import stretched


class _Config:
    """What ``_backend_param`` reads of a pytest config: its stash and whether the run only collects."""

    def __init__(self, collect_only: bool = False):
        self.stash = pytest.Stash()
        self.collect_only = collect_only

    def getoption(self, name, default=None):
        return self.collect_only if name == "collectonly" else default


def test_a_backend_vllm_cannot_load_is_skipped_quoting_vllm():
    pytest.importorskip("vllm")
    if vllm_backends.confirm("FLASHINFER").confirmed is not False:
        pytest.skip("flashinfer imports here; the case needs a backend whose class does not")
    param = plugin._backend_param(_Config(), "FLASHINFER")
    (mark,) = param.marks
    assert mark.name == "skip"
    assert mark.kwargs["reason"].startswith("FLASHINFER is not usable here: vLLM says its class does not import here")
    assert "flashinfer" in mark.kwargs["reason"]  # the import error itself


def test_collect_only_does_not_ask_vllm():
    assert plugin._backend_param(_Config(collect_only=True), "FLASHINFER").marks == ()


def test_a_usable_backend_runs():
    pytest.importorskip("vllm")
    assert plugin._backend_param(_Config(), "CPU_ATTN").marks == ()


def test_mla_backends_are_their_own_axis():
    cuda = platforms.get("cuda")
    assert "TRITON_MLA" in cuda.mla_backends and not set(cuda.mla_backends) & set(cuda.backends)
    # naming only standard backends keeps every MLA backend for the MLA checks, and the other way round
    assert platforms.check_mla_backends(cuda, ["FLASH_ATTN"]) == cuda.mla_backends
    assert platforms.check_backends(cuda, ["TRITON_MLA"]) == cuda.backends
    assert platforms.check_mla_backends(cuda, ["FLASH_ATTN", "TRITON_MLA"]) == ("TRITON_MLA",)
    assert platforms.check_backends(cuda, ["FLASH_ATTN", "TRITON_MLA"]) == ("FLASH_ATTN",)
    with pytest.raises(platforms.PlatformError, match="CPU_MLA cannot serve KV connectors on cuda"):
        platforms.check_mla_backends(cuda, ["CPU_MLA"])


def test_mla_marked_tests_take_the_mla_backends(tmp_path):
    """Collected for real: an ``mla`` test runs on CPU_MLA, once, not once per standard backend."""
    (tmp_path / "test_axis.py").write_text(textwrap.dedent('''
        import pytest

        def test_standard(attn_backend):
            pass

        @pytest.mark.mla
        def test_latent(attn_backend):
            pass
    '''))
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--platform=cpu",
                          "--collect-only", "-q", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=stretched(300))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    ids = sorted(line.split("::")[-1] for line in out.stdout.splitlines() if "::" in line)
    assert ids == ["test_latent[CPU_MLA]", "test_standard[CPU_ATTN]"]


def test_an_mla_backend_is_read_off_a_test_id():
    """JUnit written without kvconform's properties: the MLA backend in the id is a backend, not a connector."""
    from kvconform.reports.identity import parse_param_id

    assert parse_param_id("cpu-CPU_MLA-ExampleConnector-float16") == {
        "platform": "cpu", "backend": "CPU_MLA", "connector": "ExampleConnector", "variant": "float16"}
