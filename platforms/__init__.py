"""Which platform is this, what device, which attention backends.

Imports torch only (never vLLM at import time), so it runs on a machine that has
torch alone. The table below is the single source of platform facts: the pytest
plugin, the pipeline generator and the gate all read it.
"""

from __future__ import annotations

import argparse
import difflib

from . import cpu, cuda, rocm, xpu
from .spec import PlatformSpec, Probe

PLATFORMS: dict[str, PlatformSpec] = {spec.name: spec for spec in (cuda.SPEC, rocm.SPEC, xpu.SPEC, cpu.SPEC)}

# ``auto`` prefers an accelerator; ROCm before CUDA because a HIP torch answers torch.cuda too.
AUTO_ORDER: tuple[str, ...] = ("xpu", "rocm", "cuda", "cpu")
CHOICES: tuple[str, ...] = ("auto", *PLATFORMS)


class PlatformError(Exception):
    """A platform was asked for that this machine cannot serve; the message says why."""


def unknown_platform(name: str) -> str:
    """``unknown platform 'cdua': did you mean cuda? (choose one of: auto, ...)``."""
    close = difflib.get_close_matches(name.lower(), CHOICES, n=1, cutoff=0.5)
    if close:
        return f"unknown platform {name!r}: did you mean {close[0]}? (choose one of: {', '.join(CHOICES)})"
    return f"unknown platform {name!r}: choose one of: {', '.join(CHOICES)}"


def choice(name: str) -> str:
    """An argparse ``type`` for a platform option: the name, or an error that suggests the closest one."""
    if name not in CHOICES:
        raise argparse.ArgumentTypeError(unknown_platform(name))
    return name


def get(name: str) -> PlatformSpec:
    try:
        return PLATFORMS[name]
    except KeyError:
        raise PlatformError(unknown_platform(name)) from None


def probe(name: str) -> Probe:
    """Probe one platform; a probe that raises is reported as not detected, with the error."""
    try:
        return get(name).probe()
    except PlatformError:
        raise
    except Exception as exc:
        return Probe(False, f"probing {name} raised {type(exc).__name__}: {exc}")


def resolve(name: str = "auto") -> tuple[PlatformSpec, Probe]:
    """The platform to run on, with its probe; raise PlatformError when it is absent."""
    if name == "auto":
        for candidate in AUTO_ORDER:
            found = probe(candidate)
            if found.detected:
                return PLATFORMS[candidate], found
        raise PlatformError("no platform detected, not even cpu")  # cpu always probes True
    spec = get(name)
    found = probe(name)
    if not found.detected:
        raise PlatformError(f"--platform={name} was requested but no {name} device is usable: {found.reason}")
    return spec, found


def _reject_unknown(spec: PlatformSpec, requested: list[str]) -> None:
    known = (*spec.backends, *spec.mla_backends)
    unknown = [b for b in requested if b not in known]
    if unknown:
        raise PlatformError(
            f"attention backend(s) {', '.join(unknown)} cannot serve KV connectors on {spec.name}; "
            f"choose from: {', '.join(known)}"
        )


def check_backends(spec: PlatformSpec, requested: list[str] | None) -> tuple[str, ...]:
    """The (non-MLA) backends to run: the requested ones, each checked against the platform's table.

    Naming only MLA backends leaves this axis at the platform's full list (see ``check_mla_backends``).
    """
    if not requested:
        return spec.backends
    _reject_unknown(spec, requested)
    return tuple(dict.fromkeys(b for b in requested if b in spec.backends)) or spec.backends


def check_mla_backends(spec: PlatformSpec, requested: list[str] | None) -> tuple[str, ...]:
    """The MLA backends the MLA checks run on: those requested, else all the platform's.

    MLA layers never run on a non-MLA backend, so naming only non-MLA backends
    does not empty this axis: the MLA checks still run, on the platform's MLA backends.
    """
    if not requested:
        return spec.mla_backends
    _reject_unknown(spec, requested)
    return tuple(dict.fromkeys(b for b in requested if b in spec.mla_backends)) or spec.mla_backends


__all__ = ["PLATFORMS", "CHOICES", "AUTO_ORDER", "PlatformSpec", "Probe", "PlatformError",
           "choice", "unknown_platform", "get", "probe", "resolve", "check_backends", "check_mla_backends"]
