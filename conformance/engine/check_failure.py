"""The base of every check's failure: what the connector did is not what vLLM's contract or the check asks.

Each check raises its own subclass (``RoundTripFailure``, ``ContractViolation``,
``DeviceMismatch``, ...), so a report and an expectation's ``raises`` name the kind of
failure; all of them are ``CheckFailure``, so code that handles "a check found a
problem" (as opposed to the harness or vLLM raising) names one class. It derives from
``AssertionError``, as pytest reports a failed assertion.
"""

from __future__ import annotations


class CheckFailure(AssertionError):
    """A check found the connector at fault."""
