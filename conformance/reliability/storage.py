"""Nothing a connector writes may land outside its per-test storage folder.

The profile always points a connector at a fresh folder (``{storage}``), so new
entries in the connector's *default* location mean it wrote past its
configuration. ``/tmp`` is shared with pytest and every other process, so only
entries shaped like the connector's own count (ExampleConnector: a folder named
after the md5 of the prompt's tokens). Where connectors write by default is data:
``DEFAULT_STORAGE`` plus the ini option ``kvconform_default_storage`` for
out-of-tree connectors. A connector inherits the locations of what it wraps
(its profile's ``wraps``) and, when third-party, of its base classes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..connectors.selection import ConnectorParam

from kvconform.reports.identity import connector_of

from ..session.options import STORAGE_INI
from .left_behind import teardown_check


@dataclass(frozen=True)
class DefaultStorage:
    """A folder a connector writes to when nobody configures it, and the shape of its entries there."""

    folder: str
    entry: str  # regex a new top-level entry's name must fully match to count as the connector's

    def entries(self) -> set[str]:
        try:
            names = os.listdir(self.folder)
        except OSError:
            return set()
        pattern = re.compile(self.entry)
        return {name for name in names if pattern.fullmatch(name)}


# connector (or base class) name -> where it writes by default. vLLM 0.32 ExampleConnector: "/tmp" and a
# folder per prompt named by safe_hash (md5; sha256 where md5 is unavailable, under FIPS).
DEFAULT_STORAGE: dict[str, tuple[DefaultStorage, ...]] = {
    "ExampleConnector": (DefaultStorage("/tmp", r"[0-9a-f]{32}|[0-9a-f]{64}"),),
    "ExampleHiddenStatesConnector": (DefaultStorage("/tmp", r".+\.safetensors"),),
}
SHOWN = 5  # entries named in a message; the rest are counted

_TABLE_KEY = pytest.StashKey["dict[str, tuple[DefaultStorage, ...]]"]()
_BEFORE_KEY = pytest.StashKey["dict[DefaultStorage, set[str]]"]()


def storage_table(lines: list[str]) -> dict[str, tuple[DefaultStorage, ...]]:
    """``DEFAULT_STORAGE`` plus the ini lines; a malformed line is a ``ValueError`` naming it."""
    table = dict(DEFAULT_STORAGE)
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) != 3:
            raise ValueError(f"{STORAGE_INI}: {line!r}: expected CONNECTOR FOLDER REGEX")
        name, folder, entry = parts
        try:
            re.compile(entry)
        except re.error as exc:
            raise ValueError(f"{STORAGE_INI}: {line!r}: bad regex: {exc}") from None
        table[name] = (*table.get(name, ()), DefaultStorage(folder, entry))
    return table


def pytest_configure(config: pytest.Config) -> None:
    try:
        config.stash[_TABLE_KEY] = storage_table(config.getini(STORAGE_INI))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def default_storage(table: dict[str, tuple[DefaultStorage, ...]],
                    connector: ConnectorParam) -> tuple[DefaultStorage, ...]:
    """The locations a connector (or what it wraps or subclasses) writes to when not configured."""
    names = [connector.name, connector.class_name, *connector.profile.wraps]
    if connector.is_third_party:
        try:
            names += [cls.__name__ for cls in connector.load_class().__mro__]
        except Exception:  # a class that does not load has written nothing; the test says why it did not load
            pass
    found: list[DefaultStorage] = []
    for name in dict.fromkeys(names):
        found += [s for s in table.get(name, ()) if s not in found]
    return tuple(found)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    connector = connector_of(item)
    if connector is not None:
        locations = default_storage(item.config.stash[_TABLE_KEY], connector)
        item.stash[_BEFORE_KEY] = {location: location.entries() for location in locations}


def new_entries(before: dict[DefaultStorage, set[str]]) -> dict[DefaultStorage, list[str]]:
    after = {location: location.entries() - names for location, names in before.items()}
    return {location: sorted(names) for location, names in after.items() if names}


def _litter(item: pytest.Item, connector: ConnectorParam) -> Callable[[], list[str]]:
    """What the test wrote to the connector's default locations, read at its teardown (a later test may write)."""
    found = new_entries(item.stash[_BEFORE_KEY]) if _BEFORE_KEY in item.stash else {}
    problems = []
    for location, names in found.items():
        shown = ", ".join(os.path.join(location.folder, name) for name in names[:SHOWN])
        more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
        problems.append(f"{connector.name} wrote outside its per-test storage folder: new in its default "
                        f"location {location.folder}: {shown}{more}")
    return lambda: problems


pytest_runtest_makereport = teardown_check(_litter)
