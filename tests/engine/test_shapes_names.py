"""A vLLM internal renamed to a name kvconform's table does not know is one session finding
(conformance/engine/shapes.py ``mismatches()``), at the kvconform line that looks it up, never one failure per
test. The rename is simulated on the installed vLLM by pointing the table's entry at the new name."""

from __future__ import annotations

from kvconform.conformance.engine import shapes
from kvconform.conformance.vllm_install import api
from kvconform.conformance.vllm_install.lookups import CONFORMANCE_ROOT


def _line_of(relative: str, text: str) -> str:
    """``relative:N``, N the first line of that kvconform file holding ``text``."""
    lines = (CONFORMANCE_ROOT / relative).read_text().splitlines()
    return f"conformance/{relative}:{next(n for n, line in enumerate(lines, start=1) if text in line)}"


def _renamed(monkeypatch, name: str) -> None:
    place = api.PLACES[name]
    monkeypatch.setitem(api.PLACES, name, api.Place(place.modules, f"{place.attribute}_renamed", place.absent))


def test_a_renamed_function_is_named_once_with_the_line_that_looks_it_up(monkeypatch):
    _renamed(monkeypatch, "init_none_hash")
    [found] = shapes.mismatches()
    where = _line_of("engine/requests.py", 'vllm_api.find("init_none_hash")')
    assert found.line() == (f"vLLM {api.vllm_version()} has no init_none_hash_renamed in vllm.v1.core.kv_cache_utils; "
                            f"update conformance/vllm_install/api.py to where this vLLM keeps it ({where})")
    assert found.blocks("test_roundtrip") and found.blocks("test_fill") and not found.blocks("test_lint")


def test_a_renamed_class_is_one_finding_not_one_per_check_that_needs_it(monkeypatch):
    """``ModelRunnerOutput`` is also a ``Call`` of SHAPES and the owner of a field entry: still one finding."""
    _renamed(monkeypatch, "ModelRunnerOutput")
    _renamed(monkeypatch, "KVCacheConfig")  # its three field entries hang off it
    found = shapes.mismatches()
    assert [m.name for m in found] == ["KVCacheConfig", "ModelRunnerOutput"], [m.line() for m in found]
    assert found[0].where == _line_of("engine/block_sizes.py", 'has_field("KVCacheConfig.')
    assert found[1].where == _line_of("engine/scheduler.py", 'find("ModelRunnerOutput")')


def test_a_name_a_vllm_lacks_by_design_is_no_finding(monkeypatch):
    _renamed(monkeypatch, "resolve_cache_hit_alignment_tokens")  # absent by design before 0.32
    assert shapes.mismatches() == []


def test_a_vllm_module_that_raises_on_import_is_left_to_the_check_that_imports_it(monkeypatch):
    """Not a moved name: the session neither calls it one nor stops; the check that needs it meets the error."""
    import importlib

    real_import = importlib.import_module

    def raising(name, *args, **kwargs):
        if name == "kvconform_test_raising":
            raise RuntimeError("a kernel library is missing")
        return real_import(name, *args, **kwargs)

    monkeypatch.setitem(api.PLACES, "get_hash_fn_by_name",
                        api.Place(("kvconform_test_raising",), "get_hash_fn_by_name"))
    monkeypatch.setattr(api.importlib, "import_module", raising)
    assert shapes.mismatches() == []
