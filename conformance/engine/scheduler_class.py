"""The scheduler class a run names (``--kvconform-scheduler-cls``), set in every vLLM config the harness builds.

vLLM lets a user run a scheduler of their own: ``SchedulerConfig.scheduler_cls`` (vLLM's ``--scheduler-cls``), a
dotted ``module.Class`` that the engine core resolves through ``get_scheduler_cls()``. The checks drive vLLM's real
scheduler, so naming another one judges that scheduler's handling of what connectors return (a vLLM pull request's,
or a deliberately broken copy's) with the same checks. The choice is one per process: the plugin sets it when the
run is configured (each xdist worker configures itself), and every ``Rig`` puts it in the config it builds, exactly
where a user's setting goes.
"""

from __future__ import annotations

import re

_chosen: list[str] = []  # the scheduler class as vLLM takes it (module.Class); empty: vLLM's own choice
_SPEC = re.compile(r"(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<name>[A-Za-z_]\w*)")
USAGE = "--kvconform-scheduler-cls: expected module:Class (a scheduler class vLLM can import), got {text!r}"


class SchedulerClassError(ValueError):
    """The named scheduler class is malformed or cannot be imported; the message is one line."""


def qualname_of(text: str) -> str:
    """``module:Class`` -> ``module.Class``, the form ``SchedulerConfig.scheduler_cls`` takes."""
    match = _SPEC.fullmatch(text.strip())
    if match is None:
        raise SchedulerClassError(USAGE.format(text=text))
    return f"{match['module']}.{match['name']}"


def choose(qualname: str | None) -> None:
    """Every vLLM config built from now on names ``qualname`` as its scheduler class (None: vLLM's own choice)."""
    _chosen.clear()
    if qualname is not None:
        _chosen.append(qualname)


def chosen() -> str | None:
    """The scheduler class this run names, as ``SchedulerConfig.scheduler_cls`` takes it; None where it names none."""
    return _chosen[0] if _chosen else None


def config_fields() -> dict[str, str]:
    """The ``SchedulerConfig`` keyword that sets the chosen class (none where the run names none)."""
    name = chosen()
    return {"scheduler_cls": name} if name is not None else {}
