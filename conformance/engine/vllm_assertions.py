"""vLLM's bare ``assert`` statements on a connector's answers, translated into the contract the connector broke.

vLLM's scheduler checks what a connector returns (its claim, ``get_finished``'s ids, ``request_finished``'s flag)
with bare asserts: a connector that breaks the contract gets ``AssertionError`` and a line of vLLM's scheduler.
Where the suite drives the scheduler (``SchedulerDriver``), such an error is matched here by the innermost frame
in vLLM's package: its file and the asserted expression, read from the running vLLM's own source (so the line
reported is the release's own; no line number is written down here). ``TRANSLATIONS`` writes, from that frame's
variables and what the connector answered, a first line in connector terms; vLLM's assertion follows as the cause.
An assertion not in the table goes on unchanged.
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from .check_failure import CheckFailure

# the longest assert statement (in lines) read back from vLLM's source to find its expression
MAX_STATEMENT_LINES = 12


class TrippedVllmAssertion(CheckFailure):
    """vLLM's scheduler asserted on a value the connector returned; the message says which contract it broke."""


class AnsweredClaim(Protocol):
    """One answer of the connector's ``get_num_new_matched_tokens``, as returned (``scheduler.Claim``)."""

    @property
    def num_computed_tokens(self) -> int: ...

    @property
    def num_external_tokens(self) -> int | None: ...

    @property
    def load_async(self) -> bool | None: ...


@dataclass
class ConnectorAnswers:
    """What the connector returned to vLLM's scheduler, observed (never changed) where the driver calls it."""

    connector: str
    claims: Mapping[str, Sequence[AnsweredClaim]]  # request id -> every answer for it, in order
    kept_blocks: dict[str, bool] = field(default_factory=dict)  # request id -> request_finished's first value

    def last_claim(self, request_id: str) -> AnsweredClaim | None:
        claims = self.claims.get(request_id)
        return claims[-1] if claims else None


@dataclass(frozen=True)
class Tripped:
    """An assertion vLLM raised: where (``site``, its file and line), what it asserts, the frame's variables."""

    site: str
    expression: str
    variables: Mapping[str, Any]


def _vllm_root() -> Path | None:
    try:
        import vllm
    except ImportError:
        return None
    return Path(vllm.__file__).resolve().parent


def _asserted_expression(filename: str, lineno: int) -> str | None:
    """The expression of the ``assert`` statement at ``filename:lineno``, in ``ast.unparse``'s spelling."""
    lines: list[str] = []
    for offset in range(MAX_STATEMENT_LINES):
        line = linecache.getline(filename, lineno + offset)
        if not line:
            return None
        lines.append(line.strip())
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue
        statement = tree.body[0] if tree.body else None
        return ast.unparse(statement.test) if isinstance(statement, ast.Assert) else None
    return None


def _spelled(expression: str) -> str:
    return ast.unparse(ast.parse(expression, mode="eval").body)


def tripped(error: AssertionError) -> Tripped | None:
    """The assert in vLLM's package that raised ``error`` (its innermost frame there); None when none did."""
    root = _vllm_root()
    if root is None:
        return None
    innermost: TracebackType | None = None
    traceback = error.__traceback__
    while traceback is not None:
        # both sides resolved: a venv reached through a link names vLLM's files by the link, vllm.__file__ too
        path = Path(traceback.tb_frame.f_code.co_filename).resolve()
        if path.is_relative_to(root):
            innermost = traceback
        traceback = traceback.tb_next
    if innermost is None:
        return None
    filename = innermost.tb_frame.f_code.co_filename
    expression = _asserted_expression(filename, innermost.tb_lineno)
    if expression is None:
        return None
    return Tripped(f"{Path(filename).name}:{innermost.tb_lineno}", expression, dict(innermost.tb_frame.f_locals))


# ---- the sentences ---------------------------------------------------------------------------------------------

# a translation: what the connector answered and the assertion vLLM raised -> the first line, or None
Sentence = Callable[[ConnectorAnswers, Tripped], "str | None"]


def _claim_facts(answers: ConnectorAnswers, variables: Mapping[str, Any]) -> tuple[str, int, int, int] | None:
    """(request id, prompt tokens, tokens computed locally as the connector was told, external tokens claimed)."""
    request = variables.get("request")
    if request is None:
        return None
    claim = answers.last_claim(request.request_id)
    if claim is None or not isinstance(claim.num_external_tokens, int):
        return None
    return request.request_id, request.num_tokens, claim.num_computed_tokens, claim.num_external_tokens


def _from_claim(sentence: Callable[[str, str, int, int, int], str]) -> Sentence:
    """A translation written from the request's claim: (connector, request id, prompt tokens, tokens computed
    locally, external tokens claimed); None where the connector's answer for the request is not known."""
    def translate(answers: ConnectorAnswers, trip: Tripped) -> str | None:
        facts = _claim_facts(answers, trip.variables)
        return None if facts is None else sentence(answers.connector, *facts)
    return translate


@_from_claim
def _whole_prompt_claimed(connector: str, rid: str, prompt: int, local: int, external: int) -> str:
    return (f"{connector} claimed {external} external tokens of a {prompt}-token prompt ({rid}, after "
            f"{local} computed locally, {local + external} in all): a connector must leave at least the last token "
            f"to compute, since the engine computes it to sample the next one")


@_from_claim
def _claim_past_prompt(connector: str, rid: str, prompt: int, local: int, external: int) -> str:
    counted_from_start = (f"; the claim looks counted from the prompt's start: it ignores the {local} tokens "
                          f"computed locally" if 0 < local and external < prompt else "")
    return (f"{connector} claimed {external} external tokens of a {prompt}-token prompt ({rid}) after "
            f"{local} computed locally: {local + external} in all, past the prompt's end; a claim counts only the "
            f"tokens after num_computed_tokens, up to the prompt's last token at most{counted_from_start}")


@_from_claim
def _async_load_of_nothing(connector: str, rid: str, prompt: int, local: int, external: int) -> str:
    return (f"{connector} answered ({external}, True) for {rid} ({prompt}-token prompt, {local} computed "
            f"locally): an asynchronous load (load_kv_async=True) of no external tokens; a connector asks to load "
            f"asynchronously only when it claims tokens")


def _finished_unknown_request(answers: ConnectorAnswers, trip: Tripped) -> str | None:
    rid, output = trip.variables.get("req_id"), trip.variables.get("kv_connector_output")
    if rid is None:
        return None
    receiving = rid in (getattr(output, "finished_recving", None) or ())
    kind = "receiving (finished_recving)" if receiving else "sending (finished_sending)"
    reported = f"{answers.connector}'s get_finished reported {rid} as finished {kind}"
    if rid not in answers.kept_blocks:
        return (f"{reported}, but vLLM's scheduler holds no such request: get_finished reports only requests whose "
                f"transfer the connector started")
    if receiving:
        claim = answers.last_claim(rid)
        answered = (f" (its claim for {rid} was ({claim.num_external_tokens}, {claim.load_async}))"
                    if claim is not None else "")
        return (f"{reported}, but vLLM had already finished and freed {rid}{answered}: a load is reported received "
                f"only for a request whose claim asked for an asynchronous load (load_kv_async=True), while it waits "
                f"for it")
    if not answers.kept_blocks[rid]:
        return (f"{reported}, but its request_finished returned False for {rid}, so vLLM freed its blocks and "
                f"forgot it then: a connector that reports a send finished must return True from request_finished "
                f"to hold the blocks until it does")
    return (f"{reported} after vLLM had already freed it: a send is reported finished once, and only while vLLM "
            f"still holds the request")


# (vLLM file, asserted expression as vLLM's source spells it) -> the sentence, or None when the frame lacks the facts
TRANSLATIONS: dict[tuple[str, str], Sentence] = {(file, _spelled(expression)): sentence
                                                 for file, expression, sentence in (
    ("scheduler.py", "num_new_tokens > 0", _whole_prompt_claimed),
    ("scheduler.py", "num_computed_tokens <= request.num_tokens", _claim_past_prompt),
    ("scheduler.py", "num_external_computed_tokens > 0", _async_load_of_nothing),
    ("scheduler.py", "req_id in self.requests", _finished_unknown_request),
)}


def translated(error: AssertionError, answers: ConnectorAnswers) -> TrippedVllmAssertion | None:
    """The connector-terms failure for vLLM's ``error``; None when it is no assertion this table knows."""
    if isinstance(error, CheckFailure):
        return None
    trip = tripped(error)
    if trip is None:
        return None
    sentence = TRANSLATIONS.get((trip.site.split(":")[0], trip.expression))
    words = sentence(answers, trip) if sentence is not None else None
    if words is None:
        return None
    return TrippedVllmAssertion(f"{words} (vLLM asserts {trip.expression}, {trip.site})")


@contextmanager
def vllm_assertions_translated(answers: ConnectorAnswers) -> Iterator[None]:
    """Run a call into vLLM's scheduler; an assertion it trips on the connector's answers fails in their terms."""
    try:
        yield
    except AssertionError as error:
        failure = translated(error, answers)
        if failure is None:
            raise
        raise failure from error
