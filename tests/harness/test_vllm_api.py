"""The table of moved vLLM names: first place wins, older places are fallbacks, and a name nobody
keeps is one line naming it and the installed vLLM (never a bare ImportError, which would read as a
missing optional package and turn into a skip).

The lookup rules run on stand-in modules (this is kvconform's own code, not vLLM's); the last test
resolves the real table against the installed vLLM."""

from __future__ import annotations

import sys
import types

import pytest

from kvconform.conformance.harness import vllm_api
from kvconform.conformance.harness.vllm_api import PLACES, Place, VllmApiError, find, optional
from kvconform.conformance.reliability.vllm_version import installed_vllm

NEW, OLD = "kvconform_test_new_home", "kvconform_test_old_home"


@pytest.fixture
def homes(monkeypatch):
    """Two stand-in modules, newest first, and table entries that point at them."""
    new, old = types.ModuleType(NEW), types.ModuleType(OLD)
    monkeypatch.setitem(sys.modules, NEW, new)
    monkeypatch.setitem(sys.modules, OLD, old)
    monkeypatch.setitem(PLACES, "plan", Place((NEW, OLD), "plan"))
    monkeypatch.setitem(PLACES, "Calc.record", Place((NEW, OLD), "Calc.record", dropped="the record left the state"))
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
                       f"update conformance/harness/vllm_api.py to where this vLLM keeps it")
    assert not isinstance(raised.value, ImportError)  # a plugin's "package missing: skip" must not catch it


def test_a_name_outside_the_table_fails_naming_it():
    with pytest.raises(VllmApiError, match=r"^no_such_name is not in kvconform's table of vLLM names"):
        find("no_such_name")


def test_class_attributes_resolve_through_the_class(homes):
    homes[0].Calc = type("Calc", (), {"record": staticmethod(lambda: "rec")})
    assert find("Calc.record")() == "rec"


def test_optional_gives_none_only_for_a_name_a_tested_vllm_dropped(homes):
    assert optional("Calc.record") is None
    with pytest.raises(VllmApiError, match=r"has no Calc\.record in .* \(the record left the state\)"):
        find("Calc.record")
    with pytest.raises(VllmApiError, match="has no plan"):
        optional("plan")  # not declared dropped: missing is a failure


def test_every_name_in_the_table_resolves_on_the_installed_vllm():
    """The table fits the vLLM this environment tests (0.32.0 or 0.33.0): every kept name is found."""
    for name, place in PLACES.items():
        found = optional(name) if place.dropped else find(name)
        assert found is None or callable(found), name
    assert callable(find("get_kv_cache_groups")) and callable(find("get_kv_cache_config_from_groups"))
