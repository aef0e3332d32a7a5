"""Connectors new in a vLLM release: the header names those without a profile, a construction that raises is
tried once per process (whatever it raises, a pyo3 panic's ``BaseException`` included, and named with the line of
the connector's code that raised), and UMBPStoreConnector's profile says what it needs and where it runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kvconform import platforms
from kvconform.conformance.connectors import construction, selection
from kvconform.conformance.connectors.construction import (
    NOT_RUN,
    ConstructionFailure,
    construction_failure,
    describe,
    first_failure,
)
from kvconform.conformance.connectors.profiles import profile_for
from kvconform.conformance.connectors.raised_at import raised_at, shown_path
from kvconform.conformance.connectors.requirements import unmet_need
from kvconform.conformance.connectors.selection import ConnectorParam
from kvconform.conformance.plugin import _no_profile_lines
from kvconform.reports.exercised import is_construction_failure
from kvconform.reports.model import CaseResult
from kvconform.reports.not_run import NOT_RUN_PREFIX
from tests.connectors import unconstructible_broken
from tests.connectors.unconstructible_broken import PANIC_MESSAGE, PanicException

BROKEN = "tests.connectors.unconstructible_broken"


def _param(name: str, module_path: str | None = None) -> ConnectorParam:
    return ConnectorParam(name, name, module_path, profile_for(name))


def test_the_header_lists_registered_connectors_without_a_profile(monkeypatch):
    registered = {**selection.registry_modules(), "BrandNewConnector": ("vllm.distributed.kv_transfer.x", "B")}
    monkeypatch.setattr(selection, "registry_modules", lambda: registered)
    [line] = _no_profile_lines(SimpleNamespace(connectors=(), profiles=()))
    assert line.startswith("kvconform: registered by this vLLM with no profile: BrandNewConnector ("), line
    assert "ExampleConnector" not in line and "not run" in line


def test_no_line_when_every_registered_connector_has_a_profile(monkeypatch):
    profiled = {name: module for name, module in selection.registry_modules().items()
                if profile_for(name).named}
    monkeypatch.setattr(selection, "registry_modules", lambda: profiled)
    assert selection.unprofiled_registered() == []
    assert _no_profile_lines(SimpleNamespace(connectors=("ExampleConnector",), profiles=())) == []


def test_the_not_run_reason_is_the_one_the_reports_count_apart():
    failure = ConstructionFailure("X", "kv_both, worker side, in vLLM's KVConnectorFactory", "RuntimeError: no lib")
    assert NOT_RUN.startswith(NOT_RUN_PREFIX)
    assert failure.not_run() == "not run: the connector could not be constructed here (RuntimeError: no lib)"
    assert failure.failure().startswith("X could not be constructed here (kv_both, worker side, in vLLM's "
                                        "KVConnectorFactory): RuntimeError: no lib; no profile names it")


def test_the_failure_names_where_it_raised_and_the_reports_know_it_for_a_construction_failure():
    failure = ConstructionFailure("X", "kv_both, worker side, in vLLM's KVConnectorFactory", "AssertionError",
                                  "my_pkg/core.py:42: assert lib.ready()")
    assert ("X could not be constructed here (kv_both, worker side, in vLLM's KVConnectorFactory): AssertionError "
            "(raised at my_pkg/core.py:42: assert lib.ready()); no profile names it") in failure.failure()
    assert failure.not_run() == f"{NOT_RUN} (AssertionError)"

    def result(outcome: str, message: str) -> CaseResult:
        return CaseResult(run="cpu", nodeid="t", check="contract", platform="cpu", backend="CPU_ATTN",
                          connector="X", outcome=outcome, message=message)

    # as pytest records pytest.fail(..., pytrace=False): "Failed: " and the message (JUnit and results.json alike)
    assert is_construction_failure(result("failed", f"Failed: {failure.failure()}"))
    assert is_construction_failure(result("failed", failure.failure()))
    assert not is_construction_failure(result("skipped", failure.not_run()))
    assert not is_construction_failure(result("failed", "AssertionError: X could not be constructed here (y)"))


def _helper_that_parses() -> None:
    json.loads("{")


def _raised(function) -> BaseException:
    try:
        function()
    except BaseException as exc:  # noqa: BLE001 - the exception itself is what these tests read
        return exc
    raise AssertionError(f"{function.__name__} raised nothing")


def test_the_frame_shown_is_the_innermost_in_the_connectors_package():
    exc = _raised(_helper_that_parses)  # raised in the standard library, under a helper of this package
    own = raised_at(exc, "tests")
    assert own is not None and own.path == "tests/connectors/test_construction.py", own
    assert own.source == 'json.loads("{")'
    # no frame in the package: the innermost of all, where the exception was raised
    innermost = raised_at(exc, "my_pkg")
    assert innermost is not None and innermost.path.startswith("json/") and innermost.path.endswith(".py"), innermost
    assert raised_at(ValueError("never raised"), "tests") is None


@pytest.mark.parametrize("filename, module, shown", [
    ("/site-packages/my_pkg/core.py", "my_pkg.core", "my_pkg/core.py"),
    ("/site-packages/my_pkg/__init__.py", "my_pkg", "my_pkg/__init__.py"),
    ("/work/script.py", "__main__", "/work/script.py"),  # a name that does not map onto the file: the whole path
    ("/elsewhere/core.py", "my_pkg.core", "/elsewhere/core.py"),
    ("/x/core.py", "", "/x/core.py"),
])
def test_the_file_is_shown_from_the_top_of_its_package(filename, module, shown):
    assert shown_path(filename, module) == shown


def test_a_bare_assert_is_named_with_its_line_and_source():
    # a helper of the broken connectors' module: pytest rewrites the asserts of test modules, not of that one
    helper = unconstructible_broken._check_store_reachable
    error, where = describe(_raised(lambda: helper(None)), BROKEN)
    line = helper.__code__.co_firstlineno + 3
    assert (error, where) == ("AssertionError", f"tests/connectors/unconstructible_broken.py:{line}: assert reachable")
    error, where = describe(_raised(lambda: json.loads("{")), "tests.x")
    assert error.startswith("JSONDecodeError: Expecting property name") and ": json.loads" not in where, where


def _rig(tmp_path, name: str):
    from kvconform.conformance.engine.kvcache import CacheShape
    from kvconform.conformance.engine.model import write_tiny_model
    from kvconform.conformance.engine.rig import Rig

    storage = tmp_path / "kv-storage"
    storage.mkdir()
    cpu = platforms.get("cpu")
    param = ConnectorParam(name, name, BROKEN, profile_for(name))
    return Rig(param, cpu, cpu.backends[0], CacheShape(), write_tiny_model(tmp_path / "model"), storage, "cpu")


def test_a_pyo3_panic_is_the_connectors_failure_named_where_its_code_raised(tmp_path):
    """``PanicException`` derives from BaseException, as pyo3's does: it is caught, and the worker half, which
    vLLM's engine builds first, is the one that failed."""
    failure = first_failure(_rig(tmp_path, "PanickingConnector"))
    with open(unconstructible_broken.__file__) as source:
        lines = source.read().splitlines()
    line = next(i for i, text in enumerate(lines, 1)
                if text.strip() == "raise PanicException(PANIC_MESSAGE)")
    assert failure == ConstructionFailure("PanickingConnector", "kv_both, worker side, in vLLM's KVConnectorFactory",
                                          f"PanicException: {PANIC_MESSAGE}",
                                          f"tests/connectors/unconstructible_broken.py:{line}")


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(3), pytest.exit.Exception("stop"),
                                  pytest.skip.Exception("skip"), pytest.fail.Exception("fail")],
                         ids=lambda stop: type(stop).__name__)
def test_the_runs_own_stops_pass_through(tmp_path, monkeypatch, stop):
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    def create_connector(*args, **kwargs):
        raise stop

    monkeypatch.setattr(KVConnectorFactory, "create_connector", create_connector)
    with pytest.raises(type(stop)):
        first_failure(_rig(tmp_path, "PanickingConnector"))


def test_any_other_base_exception_is_caught(tmp_path, monkeypatch):
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    def create_connector(*args, **kwargs):
        raise PanicException("")

    monkeypatch.setattr(KVConnectorFactory, "create_connector", create_connector)
    failure = first_failure(_rig(tmp_path, "PanickingConnector"))
    # a message-less exception: where it raised (here, the stand-in of the package's tests) and the line's source
    assert failure is not None and failure.error == "PanicException", failure
    assert failure.raised_at.startswith("tests/connectors/test_construction.py:"), failure
    assert failure.raised_at.endswith(': raise PanicException("")'), failure


def test_construction_is_attempted_once_per_connector_and_platform(monkeypatch):
    attempts = []
    failure = ConstructionFailure("A", "kv_both, scheduler side, in vLLM's KVConnectorFactory", "RuntimeError: no")

    def attempt(connector, platform):
        attempts.append((connector.id, platform.name))
        return failure if connector.name == "A" else None

    monkeypatch.setattr(construction, "_OUTCOMES", {})
    monkeypatch.setattr(construction, "_attempt", attempt)
    cpu, cuda = platforms.get("cpu"), platforms.get("cuda")
    a, b = _param("A", "pkg.a"), _param("B", "pkg.b")
    for _ in range(3):
        assert construction_failure(a, cpu) is failure
        assert construction_failure(b, cpu) is None
    assert construction_failure(a, cuda) is failure
    assert attempts == [("A", "cpu"), ("B", "cpu"), ("A", "cuda")]


def test_an_attempt_that_raises_is_not_kept(monkeypatch):
    from kvconform.conformance.vllm_install.api import VllmApiError

    calls = []

    def attempt(connector, platform):
        calls.append(connector.name)
        raise VllmApiError("vLLM 9.9 has no KVCacheConfig")

    monkeypatch.setattr(construction, "_OUTCOMES", {})
    monkeypatch.setattr(construction, "_attempt", attempt)
    for _ in range(2):
        with pytest.raises(VllmApiError):
            construction_failure(_param("A", "pkg.a"), platforms.get("cpu"))
    assert calls == ["A", "A"]


def test_a_named_connector_is_never_gated():
    assert profile_for("ExampleConnector").named
    assert not profile_for("NobodysConnector").named
    assert not profile_for("NobodysConnector").model_copy(update={"checks": ["lint"]}).named


def test_umbp_is_skipped_off_rocm_naming_where_it_runs():
    umbp = ConnectorParam("UMBPStoreConnector", "UMBPStoreConnector", None, profile_for("UMBPStoreConnector"))
    assert umbp.profile.named and umbp.profile.requires.packages == ["mori"]
    for check in ("roundtrip", "contract"):
        assert unmet_need(umbp, platforms.get("cpu"), check) == ("UMBPStoreConnector claims only rocm; "
                                                                 "this run is on cpu")
    assert unmet_need(umbp, platforms.get("cpu"), "lint") is None
    assert "fill" in unmet_need(umbp, platforms.get("rocm"), "fill")
    # on ROCm with a MORI built without UMBP, its own words are a refusal, quoted in the skip
    assert umbp.profile.refusal and "BUILD_UMBP=ON" in umbp.profile.refusal


def test_the_kv_cache_config_carries_the_engine_cores_layout(tmp_path):
    """vLLM's engine core hands its resolved layout to the workers in KVCacheConfig.kv_cache_layout (UMBP reads it
    to copy strided blocks); the harness's configs carry it too, where this vLLM has the field."""
    from kvconform.conformance.engine import kvcache
    from kvconform.conformance.engine.kvcache import CacheShape
    from kvconform.conformance.engine.model import write_tiny_model
    from kvconform.conformance.engine.rig import Rig
    from kvconform.conformance.vllm_install import api

    storage = tmp_path / "kv-storage"
    storage.mkdir()
    cpu = platforms.get("cpu")
    rig = Rig(_param("ExampleConnector"), cpu, cpu.backends[0], CacheShape(), write_tiny_model(tmp_path / "model"),
              storage, "cpu")
    config = rig.vllm_config("kv_both")
    kv_cache_config = kvcache.build_kv_cache_config(config, [(rig.layer_names(), rig.attention_spec())])
    if not api.has_field("KVCacheConfig.kv_cache_layout"):
        pytest.skip(f"vLLM {api.vllm_version()}'s KVCacheConfig has no kv_cache_layout")
    assert config.cache_config.kv_cache_layout == rig.layout()
    assert kv_cache_config.kv_cache_layout == rig.layout()
