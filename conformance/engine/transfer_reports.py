"""What a connector's reports of finished transfers mean across steps, and what vLLM's scheduler does with them.

Each step the worker reports the requests whose sends and loads completed (``finished_sending``,
``finished_recving`` of its connector output), and vLLM's scheduler acts on them in ``update_from_output``: a
finished send frees the request's blocks, a finished load makes a request waiting for it schedulable (or frees one
aborted while it loaded). Their types are promises (promises.py); what they mean rests on the steps before, so it is
judged here against what the scheduler side answered earlier, one function per rule, each returning None or the
problem in words:

* ``unkept_sends``: a send is reported finished only for a request whose ``request_finished`` kept its blocks
  (answered True, or accepted its partial tail), once per such answer;
* ``unclaimed_receives``: a load is reported received only for a request whose claim asked for an asynchronous
  load (``get_num_new_matched_tokens`` answered load_async True for tokens), once per such claim;
* ``sends_not_freed``: once vLLM's scheduler has taken a finished send, it holds neither the request nor its
  blocks. That is vLLM's own behaviour: where a vLLM change or a scheduler class breaks it, the failure names
  vLLM's scheduler, not the connector.

``TransferReports`` keeps the bookkeeping. ``SchedulerDriver`` (engine/scheduler.py) feeds it the answers it
records and judges every report as it hands it to ``update_from_output``, so every check that drives vLLM's
scheduler judges them at every step. vLLM's scheduler asserts on some of the same reports (a request it no longer
holds); where it does, its assertion, translated (vllm_assertions.py), speaks for the same mistake. The rules here
also speak where it says nothing: a finished request it still holds for another reason, whose blocks it would free
under a transfer still in flight.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class TransferReports:
    """The transfers in flight, as the scheduler side's answers started them, and those already reported done."""

    sending: set[str] = field(default_factory=set)  # blocks kept by request_finished, send not reported yet
    receiving: set[str] = field(default_factory=set)  # asynchronous load claimed, not reported received yet
    sent: dict[str, str] = field(default_factory=dict)  # request -> where its send was last reported finished
    received: dict[str, str] = field(default_factory=dict)  # request -> where its load was last reported received
    released: set[str] = field(default_factory=set)  # request_finished answered False (blocks not kept)
    claims: dict[str, tuple[object, object]] = field(default_factory=dict)  # request -> its latest claim

    def finished(self, request_id: str, kept: bool) -> None:
        """The connector answered a request's finish (``request_finished``, or its partial tail's registration)."""
        if kept:
            self.sending.add(request_id)
            self.released.discard(request_id)
        elif request_id not in self.sending:
            self.released.add(request_id)

    def claimed(self, request_id: str, tokens: object, load_async: object) -> None:
        """The connector answered a request's lookup with (``tokens``, ``load_async``)."""
        self.claims[request_id] = (tokens, load_async)
        if load_async is True and isinstance(tokens, int) and tokens > 0:
            self.receiving.add(request_id)

    def take(self, finished_sending: Iterable[str], finished_recving: Iterable[str], where: str) -> str | None:
        """Judge one report (``where``: the step it reached vLLM at) against the transfers in flight, then count
        it done; None when both sets name only transfers in flight, else the first problem in words."""
        sending, recving = set(finished_sending), set(finished_recving)
        problem = unkept_sends(self, sending) or unclaimed_receives(self, recving)
        self.sending -= sending
        self.receiving -= recving
        self.sent.update(dict.fromkeys(sending, where))
        self.received.update(dict.fromkeys(recving, where))
        return problem


def _not_in_flight(kind: str, reported: set[str], in_flight: set[str], why: Mapping[str, str]) -> str | None:
    unknown = sorted(reported - in_flight)
    if not unknown:
        return None
    reasons = "; ".join(f"{rid}: {why[rid]}" for rid in unknown)
    return (f"the connector reported {', '.join(unknown)} as finished {kind}, but no such transfer was in flight "
            f"(in flight: {', '.join(sorted(in_flight)) or 'none'}; {reasons})")


def unkept_sends(reports: TransferReports, reported: set[str]) -> str | None:
    """None when every request reported finished sending had its blocks kept by ``request_finished`` and not
    reported since; else which were not, and why, in words."""
    why = {}
    for rid in reported - reports.sending:
        if rid in reports.sent:
            why[rid] = f"its send was reported finished already, at {reports.sent[rid]}"
        elif rid in reports.released:
            why[rid] = ("request_finished returned False for it, so vLLM did not keep its blocks for a send: a "
                        "connector that reports a send finished must return True to hold them until it does")
        else:
            why[rid] = "vLLM has not finished it (request_finished was never called for it), so it sends nothing yet"
    return _not_in_flight("sending", reported, reports.sending, why)


def unclaimed_receives(reports: TransferReports, reported: set[str]) -> str | None:
    """None when every request reported finished receiving claimed an asynchronous load not reported since; else
    which did not, and why, in words."""
    why = {}
    for rid in reported - reports.receiving:
        if rid in reports.received:
            why[rid] = f"its load was reported received already, at {reports.received[rid]}"
        elif rid in reports.claims:
            tokens, load_async = reports.claims[rid]
            why[rid] = (f"its claim was ({tokens!r}, {load_async!r}), not an asynchronous load: vLLM waits for a "
                        f"report only when a claim of tokens says load_kv_async=True")
        else:
            why[rid] = "the connector never answered a lookup for it, so vLLM waits for no load"
    return _not_in_flight("receiving", reported, reports.receiving, why)


def sends_not_freed(still_held: Mapping[str, str]) -> str | None:
    """None when vLLM's scheduler, having taken the reports of finished sends, holds nothing of those requests;
    else what it still holds (``still_held``: request -> what, for each reported request), in words."""
    if not still_held:
        return None
    held = "; ".join(f"{rid}: {what}" for rid, what in sorted(still_held.items()))
    return (f"update_from_output took the finished sends of {', '.join(sorted(still_held))} but still holds "
            f"{held}: vLLM's scheduler frees a request's blocks and forgets it when its connector reports the send "
            f"finished; it will not be told again, so what it keeps is never freed")
