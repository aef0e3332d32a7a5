"""Which child a wrapper loads a hit from: the first of its children, in the config's order, that claims one.

vLLM's MultiConnector promises (its class docstring) to "load KV from the first connector that advertises available
tokens from get_num_new_matched_tokens(), based on the order in the config". Where several children hold a hit for
a prompt (a local store and a shared one both hold it), the bytes any of them would load may look alike, so the
loaded bytes alone cannot tell which child served the request; but the order decides which tier is read, and where
the children's hits differ, how many tokens vLLM is told. So each scheduler-side call is held to the promise:

* the wrapper's claim (``get_num_new_matched_tokens``) is its first claiming child's claim, count and async flag,
  and 0 where no child claims; where a child asked before any claim answered "not yet" (``None``) the first claiming
  child is not known, so the wrapper must answer "not yet" too;
* when vLLM's scheduler hands the wrapper the allocation (``update_state_after_alloc``) with the external tokens
  claimed, the wrapper hands that count to the same child (base.py: the tokens "that will be loaded from the
  external KV cache") and 0 to every other, so no other child loads.

``WrapperClaimsRecord`` watches the children on their own instances (their answers, what they are handed) and the
wrapper's two calls, and keeps the first broken promise for ``problem()``; ``claim_problem`` and
``handing_problem`` judge. The workload check (workload/run.py) asks it after every schedule of a wrapper's engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .wrapper_lifecycle import children_of, name_of

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

PROMISE = ("vLLM's MultiConnector loads a request's hit from the first child, in the config's order, that claims "
           "tokens for it")
Answer = tuple[Any, Any]  # a claim as given: (tokens or None, load_async)
ChildAnswer = tuple[int, Answer]  # a child's place among the wrapper's children, and its claim


def first_claimer(answers: Sequence[ChildAnswer]) -> int | None:
    """The place of the first child (in the config's order) that claims tokens; None where none does. A child that
    answers "not yet" (None) before any child claims is the one returned: it may be the first with a hit."""
    for index, (tokens, _) in sorted(answers, key=lambda answer: answer[0]):
        if tokens is None or tokens > 0:
            return index
    return None


def _well_formed(answer: object) -> bool:
    """A claim shaped as base.py documents it (a token count or None, and a flag): only those are judged here."""
    return (isinstance(answer, tuple) and len(answer) == 2
            and (answer[0] is None or (isinstance(answer[0], int) and not isinstance(answer[0], bool))))


def _shown(names: Sequence[str], answers: Sequence[ChildAnswer]) -> str:
    return ", ".join(f"{names[index]} {answer!r}" for index, answer in sorted(answers, key=lambda a: a[0]))


def claim_problem(names: Sequence[str], answers: Sequence[ChildAnswer], claim: Answer) -> str | None:
    """What is wrong with the wrapper's ``claim``, given its children's ``answers`` to the same lookup; None if
    nothing. A wrapper that answers "not yet" is not judged here (vLLM asks again)."""
    if claim[0] is None:
        return None
    first = first_claimer(answers)
    asked = f"its children answered {_shown(names, answers)}" if answers else "it asked no child"
    if first is None:
        if claim[0] != 0:
            return f"it claimed {claim!r}, but {asked}: no child holds a hit to load"
        return None
    own = dict(answers)[first]
    if own[0] is None:
        return (f"it claimed {claim!r} while {names[first]} had not finished looking up (answered None), before any "
                f"child claimed ({asked}): {PROMISE}, so it must answer None (not yet) until that child has")
    if (claim[0], claim[1]) != (own[0], own[1]):
        return f"it claimed {claim!r}, but {asked}: {PROMISE}, {names[first]}, so its claim is {own!r}"
    return None


def handing_problem(names: Sequence[str], loader: int | None, external_tokens: int,
                    handed: Sequence[tuple[int, int]]) -> str | None:
    """What is wrong with what the wrapper handed its children (``handed``: each child's place and its
    ``num_external_tokens``) of an allocation with ``external_tokens`` to load, where ``loader`` is the child whose
    claim the wrapper gave (None: no child's); None if nothing."""
    if loader is None or external_tokens <= 0:
        return None
    got = dict(handed)
    if got.get(loader, 0) == external_tokens and not any(count for index, count in got.items() if index != loader):
        return None
    shown = ", ".join(f"{names[index]}: {got.get(index, 0)}" for index in sorted({loader, *got}))
    return (f"vLLM's update_state_after_alloc gave it {external_tokens} external tokens to load, which it handed on as "
            f"{shown}; but {names[loader]}, the first child that claimed them, is the one to be handed all "
            f"{external_tokens}, and every other child 0: {PROMISE}")


class WrapperClaimsRecord:
    """Every lookup and allocation vLLM's scheduler hands ``wrapper`` (its scheduler side), with what ``children``
    answered and were handed within it; ``problem()`` is the first broken promise since the last ask."""

    def __init__(self, wrapper: KVConnectorBase_V1, children: Sequence[KVConnectorBase_V1], names: Sequence[str]):
        self.names = list(names)
        self.loaders: dict[str, int | None] = {}  # request -> the child whose claim the wrapper gave, latest lookup
        self.problems: list[str] = []
        self._answers: list[ChildAnswer] | None = None  # children's answers within the wrapper's lookup in progress
        self._handed: list[tuple[int, int]] | None = None  # what children were handed within its allocation
        for index, child in enumerate(children):
            self._watch_child(child, index)
        self._watch_wrapper(wrapper)

    def _watch_child(self, child: KVConnectorBase_V1, index: int) -> None:
        lookup, allocated = child.get_num_new_matched_tokens, child.update_state_after_alloc

        def looked_up(request: Any, num_computed_tokens: int) -> Any:
            answer = lookup(request, num_computed_tokens)
            if self._answers is not None and _well_formed(answer):
                self._answers.append((index, answer))
            return answer

        def handed(request: Any, blocks: Any, num_external_tokens: int) -> None:
            if self._handed is not None:
                self._handed.append((index, num_external_tokens))
            allocated(request, blocks, num_external_tokens)

        child.get_num_new_matched_tokens = looked_up  # type: ignore[method-assign]
        child.update_state_after_alloc = handed  # type: ignore[method-assign]

    def _watch_wrapper(self, wrapper: KVConnectorBase_V1) -> None:
        lookup, allocated = wrapper.get_num_new_matched_tokens, wrapper.update_state_after_alloc

        def looked_up(request: Any, num_computed_tokens: int) -> Any:
            self._answers = []
            try:
                claim = lookup(request, num_computed_tokens)
            finally:
                answers, self._answers = self._answers, None
            if _well_formed(claim):  # a malformed claim is the contract check's to report
                self._judge(request.request_id, claim_problem(self.names, answers, claim))
                self.loaders[request.request_id] = first_claimer(answers) if claim[0] else None
            return claim

        def handed(request: Any, blocks: Any, num_external_tokens: int) -> None:
            self._handed = []
            try:
                allocated(request, blocks, num_external_tokens)
            finally:
                given, self._handed = self._handed, None
            loader = self.loaders.get(request.request_id)
            self._judge(request.request_id, handing_problem(self.names, loader, num_external_tokens, given))

        wrapper.get_num_new_matched_tokens = looked_up  # type: ignore[method-assign]
        wrapper.update_state_after_alloc = handed  # type: ignore[method-assign]

    def _judge(self, request_id: str, problem: str | None) -> None:
        if problem:
            self.problems.append(f"request {request_id}: {problem}")

    def problem(self) -> str | None:
        problems, self.problems = self.problems, []
        return problems[0] if problems else None


def watch_wrapper_claims(wrapper: KVConnectorBase_V1 | None) -> WrapperClaimsRecord | None:
    """A record of ``wrapper``'s lookups and allocations, or None where it shows vLLM no children (no
    ``sub_connectors``: no wrapper)."""
    children = children_of(wrapper) if wrapper is not None else None
    if wrapper is None or not children:
        return None
    return WrapperClaimsRecord(wrapper, children, [name_of(child, i) for i, child in enumerate(children)])
