"""What vLLM's KV connector API promises about each answer a connector gives, enforced at every call.

vLLM unpacks a connector's answers without looking at them: a wrong type shows up steps later as an
unrelated error in the scheduler or the runner, or (for the claim) only through a bare ``assert``. And a
connector may give a wrong answer only in some situation (a request that finished after decoding, a load
that completed), which no single hand-made call reaches. So the promises are one table (``PROMISES``: each
channel, the type ``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` documents and a rule), judged by
``check_answer``, and ``enforce_promises`` wraps a connector's methods with it. ``SchedulerDriver`` and
``ModelRunnerStandIn`` call it on the connectors they build, so every check that drives vLLM's scheduler
judges every answer, in every situation it reaches, without code of its own. A broken promise is a
``ContractViolation`` that names the connector, the step (``at_step``: where the driver is), the request
where the call or the answer has one, the channel (the method) and the value.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .check_failure import CheckFailure

if TYPE_CHECKING:
    from typing_extensions import TypeIs


class ContractViolation(CheckFailure):
    """A connector answered a documented call with something else."""


# --- the promises: each rule returns None when the answer conforms, else what is wrong with it ---

def _is_int(value: object) -> TypeIs[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _a(name: str) -> str:
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _type_name(value: object) -> str:
    if isinstance(value, tuple):
        return "tuple[" + ", ".join(type(v).__name__ for v in value) + "]"
    return type(value).__name__


def _not_pair(value: object) -> str | None:
    if not isinstance(value, tuple):
        return f"it is {_a(type(value).__name__)}, not a tuple"
    if len(value) != 2:
        return f"a tuple of {len(value)}, not a pair"
    return None


def _claim(value: object) -> str | None:
    if problem := _not_pair(value):
        return problem
    tokens, load_async = cast("tuple[object, object]", value)  # a pair: _not_pair said so
    if tokens is not None and not _is_int(tokens):
        return f"the token count is {_a(type(tokens).__name__)}"
    if tokens is not None and tokens < 0:
        return "the token count is negative"
    if not isinstance(load_async, bool):
        return f"the load-async flag is {_a(type(load_async).__name__)}"
    if tokens == 0 and load_async:
        return "the load-async flag is True for 0 tokens (base.py: it must be False when the count is 0)"
    return None


def _finish(value: object) -> str | None:
    if problem := _not_pair(value):
        return problem
    delay_free, transfer_params = cast("tuple[object, object]", value)  # a pair: _not_pair said so
    if not isinstance(delay_free, bool):
        return f"the delay-free flag is {_a(type(delay_free).__name__)}"
    if transfer_params is None:
        return None
    if not isinstance(transfer_params, dict):
        return f"the transfer params are {_a(type(transfer_params).__name__)}"
    strays = [key for key in transfer_params if not isinstance(key, str)]
    return (f"the transfer params' key {strays[0]!r} is {_a(type(strays[0]).__name__)}, not a str (base.py: "
            f"dict[str, Any])" if strays else None)


def _instance_of(type_path: str, optional: bool = False) -> Callable[[object], str | None]:
    """A rule for "an instance of vLLM's ``module:Class``", imported only when a value is checked."""
    module, _, name = type_path.partition(":")
    resolved: list[type] = []  # the class, once looked up: every call of every step asks

    def rule(value: object) -> str | None:
        if optional and value is None:
            return None
        if not resolved:
            resolved.append(getattr(importlib.import_module(module), name))
        if isinstance(value, resolved[0]):
            return None
        return f"it is {_a(type(value).__name__)}, not {_a(name)}" + (" or None" if optional else "")

    return rule


def _optional_int(value: object) -> str | None:
    return None if value is None or _is_int(value) else f"it is {_a(type(value).__name__)}, not an int or None"


def _events(value: object) -> str | None:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return f"{_a(type(value).__name__)} is not an iterable of events"
    return None


def _id_set(value: object, what: str, element: Callable[[object], bool], element_name: str) -> str | None:
    if not isinstance(value, set):
        return f"{what}: {_a(type(value).__name__)}, not a set"
    strays = [v for v in value if not element(v)]
    return f"{what}: {strays[0]!r} ({type(strays[0]).__name__}) is not {_a(element_name)}" if strays else None


def _finished(value: object) -> str | None:
    if problem := _not_pair(value):
        return problem
    pair = cast("tuple[object, object]", value)  # a pair: _not_pair said so
    for what, ids in zip(("the finished-sending ids", "the finished-receiving ids"), pair, strict=True):
        if ids is not None and (problem := _id_set(ids, what, lambda v: isinstance(v, str), "str")):
            return problem
    return None


def _load_errors(value: object) -> str | None:
    return _id_set(value, "the block ids", _is_int, "block id (int)")


_BASE = "vllm.distributed.kv_transfer.kv_connector.v1.base"


def _transfer_results(value: object) -> str | None:
    if problem := _instance_of(f"{_BASE}:KVConnectorTransferResults")(value):
        return problem
    for what in ("finished_sending", "finished_recving", "failed_recving"):
        if hasattr(value, what) and (problem := _id_set(getattr(value, what), what, lambda v: isinstance(v, str),
                                                        "str")):
            return problem
    return None


@dataclass(frozen=True)
class Promise:
    expected: str  # as base.py documents it
    problem: Callable[[object], str | None]


FINISH = Promise("(bool, dict[str, Any] | None)", _finish)
# channel (the connector's method) -> what base.py promises it returns
PROMISES: dict[str, Promise] = {
    # scheduler side
    "get_num_new_matched_tokens": Promise("(int | None, bool)", _claim),
    "build_connector_meta": Promise("a KVConnectorMetadata instance", _instance_of(f"{_BASE}:KVConnectorMetadata")),
    "request_finished": FINISH,
    "request_finished_all_groups": FINISH,
    "take_events": Promise("an iterable (of KVCacheEvent)", _events),
    # worker side
    "get_finished": Promise("(set[str] | None, set[str] | None)", _finished),
    "get_transfer_results": Promise("a KVConnectorTransferResults of sets of request ids", _transfer_results),
    "get_block_ids_with_load_errors": Promise("set[int]", _load_errors),
    "build_connector_worker_meta": Promise("a KVConnectorWorkerMetadata or None",
                                           _instance_of(f"{_BASE}:KVConnectorWorkerMetadata", optional=True)),
    "get_handshake_metadata": Promise("a KVConnectorHandshakeMetadata or None",
                                      _instance_of(f"{_BASE}:KVConnectorHandshakeMetadata", optional=True)),
    "get_finished_count": Promise("int | None", _optional_int),
    "get_kv_connector_kv_cache_events": Promise("a KVConnectorKVEvents or None", _instance_of(
        "vllm.distributed.kv_events:KVConnectorKVEvents", optional=True)),
    # both sides: the runner reports the worker's, the scheduler aggregates its own with them
    "get_kv_connector_stats": Promise("a KVConnectorStats or None", _instance_of(
        "vllm.distributed.kv_transfer.kv_connector.v1.metrics:KVConnectorStats", optional=True)),
}


def _shown(value: object) -> str:
    text = " ".join(repr(value).split())
    return (text if len(text) <= 120 else text[:117] + "...") + f" ({_type_name(value)})"


def check_answer(label: str, method: str, call: str, value: object) -> object:
    """``value`` if it keeps ``method``'s promise, else a ContractViolation that says who broke it and how."""
    promise = PROMISES[method]
    problem = promise.problem(value)
    if problem:
        raise ContractViolation(f"{label}: {call} returned {_shown(value)}; expected {promise.expected}: {problem}")
    return value


# --- where the driver is: the step, and the part of it ---

_STEP: ContextVar[str | None] = ContextVar("kvconform_driver_step", default=None)


@contextmanager
def at_step(where: str) -> Iterator[None]:
    """Calls into a connector made inside are judged as made at ``where`` ("step 3 (schedule)")."""
    token = _STEP.set(where)
    try:
        yield
    finally:
        _STEP.reset(token)


def current_step() -> str | None:
    """Where the driver stepping this thread is (``at_step``); None outside every driver's step."""
    return _STEP.get()


# --- the requests a call concerns: a Request among its arguments, the ids of finished-id sets ---

_ID_COLLECTIONS = (set, frozenset, list, tuple)


def _ids(value: object) -> list[str]:
    """The request ids ``value`` carries: a Request's, or the strings of a collection (one level down)."""
    request_id = getattr(value, "request_id", None)
    if isinstance(request_id, str):
        return [request_id]
    if isinstance(value, _ID_COLLECTIONS):
        return sorted(v for v in value if isinstance(v, str))
    return []


def _requests(args: tuple[object, ...], value: object) -> list[str]:
    """The requests the call names (a Request, finished ids), then those its answer names (finished ids)."""
    named = [rid for arg in args for rid in _ids(arg)]
    if isinstance(value, tuple) and not any(hasattr(arg, "request_id") for arg in args):
        named += [rid for part in value for rid in _ids(part)]
    return list(dict.fromkeys(named))


def _argument(value: object) -> str:
    request_id = getattr(value, "request_id", None)
    if isinstance(request_id, str):
        return f"request {request_id}"
    if isinstance(value, (set, frozenset)) and all(isinstance(v, str) for v in value):
        return "{" + ", ".join(map(repr, sorted(value))) + "}" if value else "set()"
    if value is None or isinstance(value, (int, str)) or (isinstance(value, (list, tuple)) and len(repr(value)) <= 40):
        return repr(value)
    return _a(type(value).__name__)


def _call(method: str, args: tuple[object, ...]) -> str:
    shown = ", ".join(map(_argument, args))
    return f"{method}({shown if len(shown) <= 100 else shown[:97] + '...'})"


def side_label(name: str, vllm_config: Any, side: str) -> str:
    """How a violation names the connector: its class, its kv_role and which side ("scheduler", "worker")."""
    kv_role = vllm_config.kv_transfer_config.kv_role if vllm_config.kv_transfer_config else None
    return f"{name} ({kv_role}, {side} side)"


def enforce_promises(connector: Any, label: str, step: Callable[[], str] = lambda: "outside any step") -> None:
    """Judge every answer ``connector`` gives on a channel of ``PROMISES`` before its caller reads it.

    Wraps the instance's methods (what vLLM's scheduler and runner look up), innermost: call it as soon as the
    connector is built, before any recorder wraps it. A broken promise raises a ContractViolation naming
    ``label`` (which connector, which side), the step (where a driver's ``at_step`` says it is, else ``step()``),
    the requests the call or the answer names, the channel and the value.
    """
    for method in PROMISES:
        original = getattr(connector, method, None)
        if callable(original):
            setattr(connector, method, _enforced(label, method, original, step))


def _enforced(label: str, method: str, original: Callable[..., object],
              step: Callable[[], str]) -> Callable[..., object]:
    def enforced(*args: Any, **kwargs: Any) -> object:
        value = original(*args, **kwargs)
        if PROMISES[method].problem(value) is None:
            return value
        requests = _requests((*args, *kwargs.values()), value)
        named = f", request{'s' if len(requests) > 1 else ''} {', '.join(requests)}" if requests else ""
        where = f"{label}, {current_step() or step()}{named}"
        return check_answer(where, method, _call(method, (*args, *kwargs.values())), value)

    return enforced
