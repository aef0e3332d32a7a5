"""Connectors new in a vLLM release: the header names those without a profile, a construction that raises is
tried once per process, and UMBPStoreConnector's profile says what it needs and where it runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvconform import platforms
from kvconform.conformance.connectors import construction, selection
from kvconform.conformance.connectors.construction import NOT_RUN, ConstructionFailure, construction_failure
from kvconform.conformance.connectors.profiles import profile_for
from kvconform.conformance.connectors.requirements import unmet_need
from kvconform.conformance.connectors.selection import ConnectorParam
from kvconform.conformance.plugin import _no_profile_lines
from kvconform.reports.not_run import NOT_RUN_PREFIX


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
