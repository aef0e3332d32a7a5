"""Which of cosmic-ray's core mutation operators ``kvconform mutate`` applies, and why some are left out.

cosmic-ray's operators work on parso's concrete syntax tree (comments and layout kept), so a mutated file is
the original text with one node's text replaced: the diff of a mutant is exactly its change.
"""

from __future__ import annotations

from typing import Any

PROVIDER = "core"

# Operators left out: name -> why.
LEFT_OUT: dict[str, str] = {
    # both need a variable named per run (``cause_variable``) and draw a random number for it: no stable id,
    # and across every variable of a module they multiply the count for changes the other operators cover
    "VariableReplacer": "needs a named variable per run and draws a random constant",
    "VariableInserter": "needs a named variable per run and draws a random variable to insert",
    "NoOp": "changes nothing: cosmic-ray's own baseline check",
}


def operators() -> list[tuple[str, Any]]:
    """(name, operator instance) of every core operator applied, in cosmic-ray's order."""
    from cosmic_ray.operators.provider import OperatorProvider  # type: ignore[import-untyped]

    provider = OperatorProvider()
    return [(f"{PROVIDER}/{name}", provider[name]()) for name in provider if name not in LEFT_OUT]
