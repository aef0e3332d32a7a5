"""The table of vLLM names the harness drives: first place wins, older places are fallbacks, a name
or field a vLLM lacks by design is None / False, and a name nobody keeps is one line naming it, the
places tried and the installed vLLM (never a bare ImportError, which would read as a missing optional
package and turn into a skip).

The lookup rules run on stand-in modules (this is kvconform's own code, not vLLM's); the last test
resolves the real table against the installed vLLM."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest

from kvconform.conformance.vllm_install import api as vllm_api
from kvconform.conformance.vllm_install.api import PLACES, Place, VllmApiError, find, has_field, optional
from kvconform.conformance.vllm_install.window import installed_vllm

NEW, OLD = "kvconform_test_new_home", "kvconform_test_old_home"


@pytest.fixture
def homes(monkeypatch):
    """Two stand-in modules, newest first, and table entries that point at them."""
    new, old = types.ModuleType(NEW), types.ModuleType(OLD)
    monkeypatch.setitem(sys.modules, NEW, new)
    monkeypatch.setitem(sys.modules, OLD, old)
    monkeypatch.setitem(PLACES, "plan", Place((NEW, OLD), "plan"))
    monkeypatch.setitem(PLACES, "Calc.record", Place((NEW, OLD), "Calc.record", absent="the record left the state"))
    monkeypatch.setitem(PLACES, "Config.kept", Place((NEW,), "Config.kept", field=True))
    monkeypatch.setitem(PLACES, "Config.added", Place((NEW,), "Config.added", absent="new in a later vLLM", field=True))
    return new, old


def test_the_newest_place_that_has_the_name_wins(homes):
    new, old = homes
    old.plan, new.plan = "old", "new"
    assert find("plan") == "new"
    del new.plan
    assert find("plan") == "old"


def test_a_module_this_vllm_does_not_have_is_skipped(homes, monkeypatch):
    homes[1].plan = "old"
    monkeypatch.setitem(PLACES, "plan", Place(("kvconform_test_no_such_module", OLD), "plan"))
    assert find("plan") == "old"


def test_a_broken_import_inside_a_known_module_is_not_mistaken_for_a_move(monkeypatch):
    def broken(name, *args, **kwargs):
        raise ModuleNotFoundError("No module named 'some_dependency'", name="some_dependency")

    monkeypatch.setitem(PLACES, "plan", Place(("kvconform_test_broken",), "plan"))
    monkeypatch.setattr(vllm_api.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="some_dependency"):
        find("plan")


def test_a_name_no_place_keeps_is_one_line_naming_it_and_the_installed_vllm(homes):
    with pytest.raises(VllmApiError) as raised:
        find("plan")
    message = str(raised.value)
    version = installed_vllm()[0]
    assert message == (f"vLLM {version} ({installed_vllm()[1]}) has no plan in {NEW} or {OLD}; "
                       f"update conformance/vllm_install/api.py to where this vLLM keeps it")
    assert not isinstance(raised.value, ImportError)  # a plugin's "package missing: skip" must not catch it


def test_a_name_outside_the_table_fails_naming_it():
    with pytest.raises(VllmApiError, match=r"^no_such_name is not in kvconform's table of vLLM names"):
        find("no_such_name")


def test_class_attributes_resolve_through_the_class(homes):
    homes[0].Calc = type("Calc", (), {"record": staticmethod(lambda: "rec")})
    assert find("Calc.record")() == "rec"


def test_optional_gives_none_only_for_a_name_a_vllm_lacks_by_design(homes):
    assert optional("Calc.record") is None
    with pytest.raises(VllmApiError, match=r"has no Calc\.record in .* \(the record left the state\)"):
        find("Calc.record")
    with pytest.raises(VllmApiError, match="has no plan"):
        optional("plan")  # not declared absent: missing is a failure


@dataclass
class _Config:
    kept: int | None = None  # a field whose default is None: declared, though its value reads as None


def test_a_field_is_probed_on_the_class_a_release_has(homes):
    homes[0].Config = _Config
    assert has_field("Config.kept") is True
    assert has_field("Config.added") is False  # a vLLM without it, by design: the caller falls back


def test_a_field_gone_without_a_declared_reason_fails_naming_it(homes, monkeypatch):
    homes[0].Config = _Config
    monkeypatch.setitem(PLACES, "Config.gone", Place((NEW,), "Config.gone", field=True))
    with pytest.raises(VllmApiError, match=rf"^vLLM .* has no field Config\.gone in {NEW}; update "):
        has_field("Config.gone")


def test_a_field_of_a_class_no_place_keeps_fails_naming_the_class(homes):
    with pytest.raises(VllmApiError, match=rf"^vLLM .* has no Config in {NEW}; update "):
        has_field("Config.added")  # a missing class is never "this vLLM has no such field"


def test_fields_and_values_are_asked_for_with_their_own_function(homes):
    homes[0].Config = _Config
    with pytest.raises(VllmApiError, match="is a field .*: probe it with has_field"):
        find("Config.kept")
    with pytest.raises(VllmApiError, match="is not a field .*: look it up with find"):
        has_field("plan")


def test_look_up_asks_each_entry_as_its_kind_says(homes):
    """What the session's check asks of every entry: a field is probed, a name lacked by design may be missing,
    any other missing name or field is a VllmApiError."""
    homes[0].Config = _Config
    homes[1].plan = "old"
    for name in ("plan", "Calc.record", "Config.kept", "Config.added"):
        vllm_api.look_up(name)  # found, or absent by design: no error
    del homes[1].plan
    with pytest.raises(VllmApiError, match=rf"^vLLM .* has no plan in {NEW} or {OLD}; update "):
        vllm_api.look_up("plan")
    del homes[0].Config
    with pytest.raises(VllmApiError, match=rf"^vLLM .* has no Config in {NEW}; update "):
        vllm_api.look_up("Config.added")  # absent by design is the field, never its class


def test_the_connector_api_is_its_packages_and_the_root_package_alone():
    assert vllm_api.in_connector_api("vllm")
    assert vllm_api.in_connector_api("vllm.distributed.kv_transfer.kv_connector.v1.base")
    assert vllm_api.in_connector_api("vllm.config")
    assert not vllm_api.in_connector_api("vllm.v1.core.kv_cache_utils")  # below the root, not below an API package
    assert not vllm_api.in_connector_api("vllm.distributed.parallel_state")
    assert not vllm_api.in_connector_api("vllm.configuration")  # a prefix of the text, not of the package


def test_every_name_in_the_table_resolves_on_the_installed_vllm():
    """The table fits the vLLM this environment tests (0.31.0, 0.32.0 or 0.33.0): every kept name is found, a
    class or function, or for a constant (EMPTY_MODEL_RUNNER_OUTPUT) an instance of a class the table holds."""
    found = {name: optional(name) if place.absent else find(name) for name, place in PLACES.items() if not place.field}
    classes = tuple(value for value in found.values() if isinstance(value, type))
    for name, value in found.items():
        assert value is None or callable(value) or (name.isupper() and isinstance(value, classes)), name
    for name in (name for name, place in PLACES.items() if place.field):
        assert has_field(name) in (True, False), name
    assert callable(find("get_kv_cache_groups")) and callable(find("get_kv_cache_config_from_groups"))


def test_a_vllm_without_the_config_fields_gets_the_block_sizes_it_records(homes, monkeypatch):
    """vLLM 0.31's KVCacheConfig has no hash_block_size / cache_hit_alignment_tokens and its engine core records
    neither: the stand-in then sets only the cache's block size, and asks for no alignment function."""
    from types import SimpleNamespace

    from kvconform.conformance.engine.block_sizes import adopt_engine_block_sizes

    new = homes[0]
    new.KVCacheConfig = type("KVCacheConfig", (), {})
    new.resolve_kv_cache_block_sizes = lambda kv_cache_config, vllm_config: (32, 16)
    for name in ("hash_block_size", "cache_hit_alignment_tokens"):
        monkeypatch.setitem(PLACES, f"KVCacheConfig.{name}",
                            Place((NEW,), f"KVCacheConfig.{name}", absent="new in a later vLLM", field=True))
    monkeypatch.setitem(PLACES, "resolve_kv_cache_block_sizes", Place((NEW,), "resolve_kv_cache_block_sizes"))
    monkeypatch.setitem(PLACES, "resolve_cache_hit_alignment_tokens", Place((NEW,), "not_there"))
    group = SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=16, prefix_cacheable=True))
    vllm_config = SimpleNamespace(cache_config=SimpleNamespace(block_size=None))
    kv_cache_config = SimpleNamespace(kv_cache_groups=[group])
    adopt_engine_block_sizes(vllm_config, kv_cache_config)
    assert vllm_config.cache_config.block_size == 16
    assert vars(kv_cache_config).keys() == {"kv_cache_groups"}  # no hash block size, no cache-hit alignment


def test_a_vllm_api_error_is_never_taken_for_the_connectors_refusal():
    """A refusal is a skip (conformance/connectors/requirements.py); kvconform failing to drive vLLM must stay a
    failure, even when the connector's refusal pattern happens to match its message."""
    from types import SimpleNamespace

    from kvconform.conformance.engine.rig import ConnectorRefused, refusal_as

    connector = SimpleNamespace(name="C", profile=SimpleNamespace(refusal="has no"))
    with pytest.raises(VllmApiError), refusal_as(ConnectorRefused, connector):
        raise VllmApiError("vLLM 0.31.0 has no plan in m")
    with pytest.raises(ConnectorRefused), refusal_as(ConnectorRefused, connector):
        raise ValueError("this platform has no CUDA")
