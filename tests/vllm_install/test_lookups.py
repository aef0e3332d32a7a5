"""Where kvconform's sources look a vLLM name up (conformance/vllm_install/lookups.py): the line a missing
name's finding points at. Run on a tree of stand-in sources laid out as a wheel installs kvconform, and once on
kvconform's own sources."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kvconform.conformance.vllm_install import lookups


@pytest.fixture
def wheel_tree(tmp_path, monkeypatch):
    """A ``site-packages/kvconform/conformance/`` of stand-in sources, as the lookups' root."""
    root = tmp_path / "site-packages" / "kvconform" / "conformance"
    (root / "engine").mkdir(parents=True)
    (root / "checks").mkdir()
    (root / "vllm_install").mkdir()
    monkeypatch.setattr(lookups, "CONFORMANCE_ROOT", root)
    monkeypatch.setattr(lookups, "TABLE", root / "vllm_install" / "api.py")
    lookups.first_lookups.cache_clear()
    yield root
    lookups.first_lookups.cache_clear()


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


def test_a_names_first_lookup_in_path_order_is_its_location(wheel_tree):
    _write(wheel_tree / "engine" / "requests.py", '''\
        def hasher():
            text = "init_none_hash"
            where = text.find("init_none_hash")  # a string's method: not a lookup
            init_none_hash = vllm_api.find("init_none_hash")
            return api.optional('_print_warning_once'), has_field("KVCacheConfig.hash_block_size")
        ''')
    _write(wheel_tree / "checks" / "fill.py", 'memo = vllm_api.optional("_print_warning_once")\n')
    _write(wheel_tree / "vllm_install" / "api.py", 'PLACES = {"init_none_hash": ..., "Scheduler": ...}\n'
                                                    'find("Scheduler")\n')
    assert lookups.lookup_location("init_none_hash") == "conformance/engine/requests.py:4"
    assert lookups.lookup_location("_print_warning_once") == "conformance/checks/fill.py:1"  # checks/ < engine/
    # looked up only through a field of it: the first such lookup
    assert lookups.lookup_location("KVCacheConfig") == "conformance/engine/requests.py:5"
    # looked up nowhere by a literal (the table's own lines are not lookups): its entry in the table
    assert lookups.lookup_location("Scheduler") == "conformance/vllm_install/api.py:1"
    assert lookups.lookup_location("never_named") == "conformance/vllm_install/api.py"


def test_kvconforms_own_lookups_are_found_with_the_checkouts_paths():
    lookups.first_lookups.cache_clear()
    requests = lookups.CONFORMANCE_ROOT / "engine" / "requests.py"
    line = next(number for number, text in enumerate(requests.read_text().splitlines(), start=1)
                if 'find("init_none_hash")' in text)
    assert lookups.lookup_location("init_none_hash") == f"conformance/engine/requests.py:{line}"
    assert lookups.checkout_path(requests) == "conformance/engine/requests.py"
