"""The suite's expectations, applied to ``kvconform bench``: what is already known about a connector here.

The bench times a connector's plain round-trip, the test the suite names
``conformance/test_roundtrip.py::test_roundtrip[<platform>-<backend>-<connector>-<dtype>]``
(the backend's preferred layout and block size, as the bench uses). So the entry
that decides that test decides the bench: an xfail entry turns the bench's
failure into that finding (if the entry pins an exception and message, only that
failure: anything else stays an error and names the entry), and a skip entry
skips the connector. A known bug then neither fails every bench nor hides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvconform.errors import UserError
from kvconform.reports import identity as ident

if TYPE_CHECKING:
    from ..session.expectation_matching import Expectation

BENCHED_TEST = "conformance/test_roundtrip.py::test_roundtrip[{param_id}]"
CHECK = "roundtrip"


@dataclass
class KnownResults:
    expectations: list[Expectation]  # for this platform (and "any")
    platform: str
    backend: str
    dtype: str

    @classmethod
    def load(cls, platform: str, backend: str, dtype: str) -> KnownResults:
        from ..session.expectation_loading import EXPECTATIONS_DIR, ExpectationError, load_expectations
        from ..session.expectation_matching import holding_here

        try:
            loaded = load_expectations([EXPECTATIONS_DIR])
        except ExpectationError as exc:
            raise UserError(str(exc)) from None
        return cls(holding_here(loaded, platform), platform, backend, dtype)

    def entry_for(self, connector: str) -> Expectation | None:
        """The expectation that decides the round-trip test the bench stands for, or None."""
        from ..session.expectation_matching import decide

        param_id = f"{self.platform}-{self.backend}-{connector}-{self.dtype}"
        identity = ident.Identity(check=CHECK, platform=self.platform, backend=self.backend, connector=connector,
                                  variant=self.dtype, param_id=param_id)
        return decide(self.expectations, identity, BENCHED_TEST.format(param_id=param_id))

    def skip_reason(self, connector: str) -> str | None:
        expectation = self.entry_for(connector)
        if expectation is None or expectation.entry.expect != "skip":
            return None
        return f"{expectation.entry.reason} ({expectation.where})"

    def failure(self, connector: str, error: BaseException) -> tuple[dict[str, Any] | None, str | None]:
        """(the finding ``error`` is, or None; why it is not the entry's expected failure, or None)."""
        expectation = self.entry_for(connector)
        if expectation is None or expectation.entry.expect != "xfail":
            return None, None
        entry = expectation.entry
        if getattr(entry, "raises", None):  # the entry pins its failure: only that one is the finding
            why = entry.mismatch("call", error)
            if why:
                return None, f"not the failure {expectation.where} expects: {why}"
        finding = {"class": getattr(entry, "finding_class", None), "reason": entry.reason, "link": entry.link,
                   "where": expectation.where}
        return finding, None
