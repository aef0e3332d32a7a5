"""What the harness relies on of the vLLM internals it drives: their names, and one table, ``SHAPES``.

``vllm_install/api.py`` says where each internal lives; a release can move a name to a place the table does
not know, or keep it and still change what the harness relies on (vLLM 0.34's ``ModelRunnerOutput`` lost
``req_id_to_index``). Each reliance is an entry: a ``Call`` (an internal kvconform calls, with the arguments
it passes, checked with ``inspect.signature(...).bind``) or a ``StandIn`` (a vLLM function handed a kvconform
stand-in, which must provide every ``self.<attribute>`` the function reads). ``mismatches()`` looks every name
of ``api.PLACES`` up, then checks each entry whose names this vLLM has, once at session start; a mismatch is
"kvconform cannot drive this vLLM": named once in the header and verdict with the kvconform line that relies
on it (for a name, its first lookup: ``vllm_install/lookups.py``), and the tests that need it are not run for
that reason, never failed as the connector's.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..vllm_install import api
from ..vllm_install.lookups import checkout_path, lookup_location

# conformance test modules that drive vLLM's internals (all but the lint, which reads source only)
DRIVING = None


@dataclass(frozen=True)
class Call:
    """kvconform calls ``name`` (a key of ``api.PLACES``) with these arguments, at ``used_at``."""

    name: str
    used_at: str  # "module:qualname" of the kvconform function that makes the call
    positional: tuple[str, ...] = ()  # what each positional argument is, in order
    keywords: tuple[str, ...] = ()
    # keywords passed only where vLLM declares the field (an ``api.PLACES`` field entry "name.field" says so)
    where_declared: tuple[str, ...] = ()
    modules: tuple[str, ...] | None = DRIVING  # the conformance test modules that need it (None: all that drive vLLM)

    @property
    def needs(self) -> tuple[str, ...]:
        """The entries of ``api.PLACES`` this check looks up."""
        return (self.name, *(f"{self.name}.{k}" for k in self.where_declared))

    def problem(self) -> str | None:
        target = api.find(self.name)
        try:
            signature = inspect.signature(target)
        except (TypeError, ValueError):
            return None  # a builtin without a signature: nothing to compare
        passed = [*self.keywords, *(k for k in self.where_declared if api.has_field(f"{self.name}.{k}"))]
        try:
            signature.bind(*self.positional, **dict.fromkeys(passed))
        except TypeError as exc:
            return f"{self.name} {_reworded(str(exc))}"
        return None


@dataclass(frozen=True)
class StandIn:
    """kvconform hands ``stand_in`` (one of its own classes) to vLLM's ``owner.method`` as its ``self``."""

    owner: str  # a key of api.PLACES: the vLLM class whose method is called
    method: str
    stand_in: Callable[[], type]  # the stand-in class, imported when checked (it may import torch)
    used_at: str
    modules: tuple[str, ...] | None = DRIVING

    @property
    def needs(self) -> tuple[str, ...]:
        return (self.owner,)

    def problem(self) -> str | None:
        function = getattr(api.find(self.owner), self.method)
        cls = self.stand_in()
        missing = sorted(a for a in _self_reads(function) if not _provides(cls, a))
        if not missing:
            return None
        return (f"{self.owner}.{self.method} now reads {', '.join(missing)} of the layer it is given, which "
                f"kvconform's {cls.__name__} does not provide")


def _state_layer() -> type:
    from .hybrid_cache import _StateLayer

    return _StateLayer


_STEP = "kvconform.conformance.engine.scheduler:SchedulerDriver._schedule_and_run"
_HYBRID = ("test_fill", "test_block_sizes", "test_block_sizes_pair")

SHAPES: tuple[Call | StandIn, ...] = (
    Call("ModelRunnerOutput", _STEP, keywords=("req_ids", "sampled_token_ids", "kv_connector_output"),
         where_declared=("req_id_to_index",)),
    Call("Scheduler", "kvconform.conformance.engine.scheduler:SchedulerDriver.__post_init__",
         keywords=("vllm_config", "kv_cache_config", "structured_output_manager", "block_size", "hash_block_size",
                   "log_stats")),
    Call("Request", "kvconform.conformance.engine.requests:new_request",
         positional=("request_id", "prompt_token_ids", "sampling_params", "pooling_params"),
         keywords=("block_hasher", "mm_features")),
    Call("KVConnectorOutput", "kvconform.conformance.engine.runner:ModelRunnerStandIn.step",
         keywords=("finished_sending", "finished_recving", "failed_recving", "invalid_block_ids",
                   "kv_connector_stats")),
    Call("get_kv_cache_config_from_groups", "kvconform.conformance.engine.kvcache:build_kv_cache_config",
         positional=("vllm_config", "kv_cache_groups", "available_memory")),
    Call("allocate_kv_cache", "kvconform.conformance.engine.kvcache:allocate",
         positional=("kv_cache_config", "device", "layout", "kernel_block_sizes")),
    StandIn("MambaBase", "bind_kv_cache", _state_layer, "kvconform.conformance.engine.hybrid_cache:_StateLayer.bind",
            modules=_HYBRID),
)


@dataclass(frozen=True)
class Mismatch:
    """One reliance the installed vLLM no longer meets: what changed, and where kvconform relies on it."""

    what: str  # "ModelRunnerOutput no longer takes req_id_to_index"
    where: str  # "conformance/engine/scheduler.py:113"
    modules: tuple[str, ...] | None  # the conformance test modules that cannot run (None: all that drive vLLM)
    name: str = ""  # the ``api.PLACES`` entry no known place holds, where that is the mismatch

    def line(self) -> str:
        return f"{self.what} ({self.where})"

    def blocks(self, module: str) -> bool:
        """Whether the conformance test module ``module`` (its name, ``test_fill``) needs what is missing."""
        return module != "test_lint" if self.modules is None else module in self.modules


def mismatches(shapes: tuple[Call | StandIn, ...] = SHAPES) -> list[Mismatch]:
    """Every name of ``api.PLACES`` the installed vLLM keeps in none of its places, then every entry of ``shapes``
    it no longer fits; an entry that needs a missing name is not checked (that name is its mismatch)."""
    found = missing_names()
    missing = {m.name for m in found}
    for shape in shapes:
        if missing.intersection(shape.needs):
            continue
        try:
            problem = shape.problem()
        except api.VllmApiError as exc:
            problem = str(exc)
        if problem:
            found.append(Mismatch(problem, _location(shape), shape.modules))
    return found


def missing_names() -> list[Mismatch]:
    """A mismatch per entry of ``api.PLACES`` the installed vLLM keeps in none of its places, at kvconform's first
    lookup of it; a field or attribute of a class that is itself missing is that class's mismatch, not its own."""
    failed: dict[str, str] = {}
    for name in api.PLACES:
        try:
            api.look_up(name)
        except api.VllmApiError as exc:
            failed[name] = str(exc)
        except Exception:  # vLLM's module raised on import: not a moved name, so not this question's answer;
            continue  # the check that imports it meets the error and reports it as its own
    return [Mismatch(what, lookup_location(name), None, name) for name, what in failed.items()
            if name.rpartition(".")[0] not in failed]


def _reworded(bind_error: str) -> str:
    """``inspect``'s bind error, as what changed: "no longer takes x", "now requires x", "takes fewer arguments"."""
    if "unexpected keyword argument" in bind_error:
        return f"no longer takes {bind_error.rpartition(' ')[2].strip(chr(39))}"
    if "missing a required argument" in bind_error:
        return f"now requires {bind_error.rpartition(' ')[2].strip(chr(39))}, which kvconform does not pass"
    return f"no longer accepts kvconform's arguments ({bind_error})"


def _location(shape: Call | StandIn) -> str:
    """``conformance/engine/scheduler.py:113``: the line of ``used_at`` that names the internal (else its first)."""
    import importlib

    module_name, _, qualname = shape.used_at.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    lines, first = inspect.getsourcelines(target)
    short = shape.name if isinstance(shape, Call) else shape.method
    offset = next((i for i, text in enumerate(lines) if f"{short}(" in text or f".{short}" in text), 0)
    return f"{checkout_path(Path(inspect.getsourcefile(target) or module_name))}:{first + offset}"


def _self_reads(function: Any) -> set[str]:
    """The attributes ``function`` reads of its first parameter (``self.x``), from its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or not node.args.args:
        return set()
    me = node.args.args[0].arg
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name) and n.value.id == me}


def _provides(cls: type, attribute: str) -> bool:
    """Whether instances of ``cls`` have ``attribute``: defined on the class, or assigned in its ``__init__``."""
    if hasattr(cls, attribute):
        return True
    init = cls.__dict__.get("__init__")
    if init is None:
        return False
    tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    return any(isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and n.attr == attribute
               and isinstance(n.value, ast.Name) and n.value.id == "self" for n in ast.walk(tree))
