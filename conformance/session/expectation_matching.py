"""Which expectation decides a test: the entries that hold in this run, matched against a test's identity.

A test is matched by its node id or parametrize id and by its identity (connector, check,
backend); the first entry that matches decides it. The suite's plugin and ``kvconform bench``
decide with the same entries, so a finding is the same finding in both.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvconform.reports import identity as ident

from ..vllm_install.window import installed_vllm
from .expectation_schema import ANY_PLATFORM, SELECTORS, Entry


@dataclass(frozen=True)
class Expectation:
    """An entry where it was written: ``where`` is ``file:line``, what messages point the reader to."""

    entry: Entry
    platform: str
    where: str

    def matches(self, identity: ident.Identity, nodeid: str) -> bool:
        e = self.entry
        if e.test and not (ident.glob_match(nodeid, e.test) or ident.glob_match(identity.param_id, e.test)):
            return False
        fields = {"connector": identity.connector, "check": identity.check, "backend": identity.backend}
        return all(ident.glob_match(value, getattr(e, key)) for key, value in fields.items() if getattr(e, key))

    def selector(self) -> str:
        return " ".join(f"{key}={getattr(self.entry, key)}" for key in SELECTORS if getattr(self.entry, key))

    def mark(self) -> pytest.MarkDecorator | None:
        """pytest's strict xfail or skip; which failure an xfail accepts, the plugin's ``pytest_runtest_makereport``
        checks (``plugin/expectations.py``)."""
        e = self.entry
        if e.expect == "xfail":
            return pytest.mark.xfail(reason=f"{e.finding_class}: {e.reason} ({e.link}; {self.where})", strict=True)
        if e.expect == "skip":
            return pytest.mark.skip(reason=f"{e.reason} ({self.where})")
        return None

    def properties(self) -> list[tuple[str, str]]:
        values: dict[str, str | None] = {"expect": self.entry.expect, "where": self.where,
                                         "reason": self.entry.reason, "link": self.entry.link}
        pairs = [(name, value) for key, name in ident.EXPECT_PROPERTIES.items() if (value := values[key])]
        if self.entry.finding_class:
            pairs.append((ident.EXPECT_CLASS_PROPERTY, self.entry.finding_class))
        return pairs


def decide(expectations: list[Expectation], identity: ident.Identity, nodeid: str) -> Expectation | None:
    """The first entry that matches decides a test: a ``pass`` entry above a broad xfail exempts tests."""
    return next((e for e in expectations if e.matches(identity, nodeid)), None)


def holding_here(loaded: list[Expectation], platform: str | None) -> list[Expectation]:
    """The entries for ``platform`` (or any platform) whose ``vllm:`` condition the installed vLLM meets.

    The suite and ``kvconform bench`` both decide with these, so a finding pinned per vLLM release
    is the same finding in both.
    """
    vllm = installed_vllm()
    return [e for e in loaded if e.platform in (platform, ANY_PLATFORM) and e.entry.holds_on(vllm[0] if vllm else None)]
