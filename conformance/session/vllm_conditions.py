"""An expectation's ``vllm:`` condition: the vLLM versions an entry holds on, as a PEP 440 range.

Entries survive vLLM versions: a condition such as ``">=0.33"`` is met by the dev builds
vLLM's CI makes after that release, so a bug pinned once holds on every build that still
carries it.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


def vllm_specifiers(condition: str) -> SpecifierSet:
    """An entry's ``vllm:`` condition as PEP 440 specifiers; ValueError (one line) for anything else.

    A bare version (``"0.32.0"``) means that release (``==0.32.0``: its local builds such as
    ``0.32.0+cpu`` too); otherwise a specifier set (``">=0.33"``, ``">=0.31,<0.33"``, ``"==0.33.*"``).
    """
    text = condition.strip()
    try:
        return SpecifierSet(f"=={Version(text)}")
    except InvalidVersion:
        pass
    try:
        specifiers = SpecifierSet(text)
    except InvalidSpecifier:
        specifiers = SpecifierSet()
    if not specifiers:
        raise ValueError(f"{condition!r} is not a vLLM version or PEP 440 range: write an exact release "
                         f'("0.32.0") or a range (">=0.33", ">=0.31,<0.33", "==0.33.*")')
    return specifiers


def vllm_meets(condition: str, version: str) -> bool:
    """Whether the installed vLLM ``version`` meets a ``vllm:`` condition.

    Pre-releases and dev builds are admitted (pip refuses them unless asked): vLLM's CI
    builds every pull request as a dev build after the last release (``0.33.1.dev42+gabc1234``),
    and a bug present in 0.33.0 is expected there too, so ``">=0.33"`` holds on it. As PEP 440
    orders them, a release candidate comes before its release: 0.33.0rc1 is below ``">=0.33"``.
    """
    try:
        return vllm_specifiers(condition).contains(version, prereleases=True)
    except InvalidVersion:  # an unreadable installed version meets no condition
        return False
