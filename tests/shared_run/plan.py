"""What a self-test asks of the suite, and which self-tests can share one suite run.

A self-test module declares its run as a module constant, a ``SelfTestRun``: the ``-k`` selection, the connectors
(the unmodified one and its broken copies) and the profile files. Runs whose profiles agree share one suite
process (tests/shared_run/runner.py), each connector there running the union of the selections that name it, so
the suite's fixed cost (vLLM's import, collection) is paid once per group, not once per self-test.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.shared_run import keywords


@dataclass(frozen=True)
class SelfTestRun:
    """The ``-k select`` tests over ``connectors`` (as ``--connector`` takes them), with ``profiles`` added."""

    select: str
    connectors: tuple[str, ...]
    profiles: tuple[Path, ...] = ()
    name: str = field(default="", compare=False)  # module.CONSTANT, set where it is found

    def __post_init__(self) -> None:
        keywords.check(self.select)

    @classmethod
    def of_broken(cls, select: str, original: str, module: str, broken: Iterable[str], *,
                  profiles: Sequence[Path] = (), also: Sequence[str] = ()) -> SelfTestRun:
        """The unmodified ``original``, every broken copy ``broken`` names in ``module`` (its dotted name), and the
        connectors ``also`` names."""
        return cls(select, (original, *(f"{module}:{name}" for name in broken), *also), tuple(profiles))

    @property
    def labels(self) -> tuple[str, ...]:
        """The connectors as test ids name them: a class name for ``package.module:Class``."""
        return tuple(spec.rpartition(":")[2] for spec in self.connectors)

    def as_json(self) -> dict[str, object]:
        return {"name": self.name, "select": self.select, "labels": list(self.labels)}


def declared(modules: Iterable[ModuleType]) -> list[SelfTestRun]:
    """The runs ``modules`` declare, each named ``module.CONSTANT``, in a stable order."""
    found: dict[str, SelfTestRun] = {}
    for module in modules:
        for attribute, value in vars(module).items():
            if isinstance(value, SelfTestRun):
                found[f"{module.__name__}.{attribute}"] = value
    return [SelfTestRun(run.select, run.connectors, run.profiles, name) for name, run in sorted(found.items())]


# a connector no profile file of a run describes: kvconform's own profile, or the defaults, serve it
KVCONFORM_OWN = "kvconform's own profile"


def _profile_rows(path: Path) -> dict[str, object]:
    return dict((yaml.safe_load(path.read_text()) or {}).get("connectors") or {})


def _agree(rows: dict[str, object], more: dict[str, object]) -> bool:
    return all(rows[name] == row for name, row in more.items() if name in rows)


def groups(runs: Sequence[SelfTestRun]) -> list[list[SelfTestRun]]:
    """The runs in as few groups as their profiles allow: a connector two runs' profile files describe differently
    (or one describes and the other leaves to kvconform) would get one description in both, so they are kept
    apart."""
    placed: list[tuple[dict[str, object], list[SelfTestRun]]] = []
    for run in runs:
        rows: dict[str, object] = {}
        for path in run.profiles:
            rows.update({name: row for name, row in _profile_rows(path).items() if name not in rows})
        rows.update({label: KVCONFORM_OWN for label in run.labels if label not in rows})
        for group_rows, members in placed:
            if _agree(group_rows, rows):
                group_rows.update(rows)
                members.append(run)
                break
        else:
            placed.append((rows, [run]))
    return [members for _, members in placed]


def group_key(group: Sequence[SelfTestRun]) -> str:
    """A name for a group's results that changes with anything its runs ask for."""
    text = json.dumps([[run.name, run.select, run.connectors, [str(p) for p in run.profiles]] for run in group])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def results_of(run: SelfTestRun) -> Any:
    """A module-scoped fixture that gives ``run``'s status, outcomes and output from the session's shared run
    (tests/conftest.py's ``shared_suite``), under the name a module gives it: ``fill_run = results_of(RUN)``."""

    @pytest.fixture(scope="module")
    def results(shared_suite: Any) -> tuple[int, list[Any], str]:
        return shared_suite.results(run)

    return results
