"""The lint reads what a connector runs inside vLLM, not just its module.

The closure is read from the installed vLLM's files without importing vLLM. The
last test runs the real lint check for SimpleCPUOffloadConnector, whose only
device assumptions sit in helper modules outside its own file.
"""

from __future__ import annotations

import pytest

from kvconform.conformance.connectors.selection import registry_modules
from kvconform.conformance.lint.closure import connector_closure

pytest_plugins = ["pytester"]


def _closure(name: str):
    closure = connector_closure(registry_modules()[name][0])
    assert closure is not None, f"{name}: no closure in the installed vLLM"
    return closure


WORKER = "vllm/v1/simple_kv_offload/worker.py"


def _priority_range_line() -> int:
    """Where the installed vLLM calls torch.cuda.Stream.priority_range() (worker.py:165 in 0.32.0, 171 in 0.33.0)."""
    closure = _closure("SimpleCPUOffloadConnector")
    lines = (closure.root / WORKER).read_text(encoding="utf-8").splitlines()
    return next(n for n, line in enumerate(lines, 1) if "torch.cuda.Stream.priority_range()" in line)


def test_simple_cpu_offload_runs_its_helpers_and_its_own_module_comes_first():
    closure = _closure("SimpleCPUOffloadConnector")
    assert closure.files[0] == "vllm/distributed/kv_transfer/kv_connector/v1/simple_cpu_offload_connector.py"
    assert "vllm/v1/simple_kv_offload/worker.py" in closure.files
    assert not any(f.endswith("kv_connector/v1/base.py") for f in closure.files)  # shared infrastructure


def test_findings_in_helpers_are_named_by_their_path_inside_vllm_and_line():
    findings = _closure("SimpleCPUOffloadConnector").lint()
    places = {(f.path, f.line, f.rule) for f in findings if f.severity == "error"}
    assert (WORKER, _priority_range_line(), "KVC004") in places  # torch.cuda.Stream.priority_range()


def test_the_lint_of_the_registered_module_alone_would_have_passed():
    from kvconform.conformance.lint import lint_files

    own = _closure("SimpleCPUOffloadConnector").paths()[0]
    assert not [f for f in lint_files([own]) if f.severity == "error"]


def _pinning_file(root) -> str:
    """The file of the installed vLLM whose top-level ``pin_tensor`` calls cudaHostRegister, found by its text."""
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in sorted((root / "vllm").rglob("*.py"))}
    found = [p.relative_to(root).as_posix() for p, text in texts.items()
             if "\ndef pin_tensor(" in text and "torch.cuda.cudart().cudaHostRegister" in text]
    assert len(found) == 1, f"pin_tensor calls cudaHostRegister in {found or 'no file'} of the installed vLLM"
    return found[0]


@pytest.mark.parametrize("name", ["SimpleCPUOffloadConnector", "HiSparseConnector"])
def test_pin_tensor_is_linted_wherever_the_installed_vllm_defines_it(name):
    closure = _closure(name)
    where = _pinning_file(closure.root)  # v1/simple_kv_offload/cuda_mem_ops.py in 0.32, utils/host_memory.py in 0.34
    assert closure.reads(where, "pin_tensor")
    found = {(f.path, f.function, f.call) for f in closure.lint()}
    assert (where, "pin_tensor", "torch.cuda.cudart") in found


def test_hisparse_and_mooncake_store_helpers_are_linted():
    assert any(f.startswith("vllm/v1/hisparse/") for f in _closure("HiSparseConnector").files)
    assert any(f.endswith("mooncake/store/worker.py") for f in _closure("MooncakeStoreConnector").files)
    assert any("lmcache_integration/" in f for f in _closure("LMCacheConnectorV1").files)


def test_the_lint_check_fails_naming_file_and_line(pytester):
    pytester.makefile(".yaml", empty="platform: cpu\nexpectations: []\n")
    result = pytester.runpytest("--pyargs", "kvconform.conformance.test_lint", "--platform=cpu",
                                "-p", "no:cacheprovider", "--connector", "SimpleCPUOffloadConnector", "-k", "test_lint",
                                "--kvconform-expectations", "empty.yaml", "-rf")
    result.assert_outcomes(failed=1)
    # as many errors as the closure's lint finds: 5 on vLLM 0.32.0, 6 on 0.34.0 (host_memory's unpin_tensor too)
    closure = _closure("SimpleCPUOffloadConnector")
    errors = sum(f.severity == "error" for f in closure.lint())
    result.stdout.fnmatch_lines([f"*SimpleCPUOffloadConnector: {errors} lint error(s) in the {len(closure.files)} "
                                 f"file(s) of vLLM it runs: *{WORKER}:{_priority_range_line()} KVC004*"])


def test_a_symlinked_folder_is_read_as_the_gate_overlay_links_it(tmp_path):
    from kvconform.conformance.vllm_install.import_graph import installed_sources

    real = tmp_path / "real" / "kv_offload"
    real.mkdir(parents=True)
    (real / "worker.py").write_text("import torch\n")
    overlay = tmp_path / "overlay" / "vllm" / "v1"
    overlay.mkdir(parents=True)
    (overlay / "kv_offload").symlink_to(real, target_is_directory=True)
    assert "vllm/v1/kv_offload/worker.py" in installed_sources(tmp_path / "overlay")
