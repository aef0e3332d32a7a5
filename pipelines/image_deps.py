"""``python3 -m kvconform.pipelines.image_deps``: add what kvconform needs to a vLLM CI image, change nothing there.

A generated step installs the kvconform wheel with ``--no-deps`` into an image that
lacks it (``pipelines/install.py``), then runs this. vLLM CI's test environment is
pinned (``requirements/test.txt``: pytest, pytest-timeout, PyYAML at exact versions)
and the suite must run over what the image holds, so a requirement whose package is
installed at all is left alone (with a note when the version differs from kvconform's
pin), and only packages that are missing are installed, with every installed package
held at its version by a constraints file: pip fails on a conflict instead of
upgrading the image. Standard library only: it runs before kvconform's dependencies
exist.
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from typing import Any

DISTRIBUTION = "kvconform"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PIN = re.compile(r"^==\s*([^,;\s]+)\s*$")
PIP = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(distribution: str = DISTRIBUTION) -> list[str]:
    """The distribution's own requirements (no extras' ones), as written in its metadata."""
    return [req for req in metadata.requires(distribution) or [] if "extra" not in req.partition(";")[2]]


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def plan(reqs: list[str], installed: Callable[[str], str | None]) -> tuple[list[str], list[str]]:
    """(requirements to install because their package is missing, notes on packages kept as they are)."""
    missing, notes = [], []
    for req in reqs:
        match = _NAME.match(req)
        if match is None:
            continue
        name = match.group(1)
        have = installed(name)
        if have is None:
            missing.append(req.partition(";")[0].strip())
            continue
        wanted = req.partition(";")[0][match.end():].strip()
        if wanted and not satisfies(have, wanted):
            notes.append(f"kvconform: using the image's {name} {have} (kvconform asks for {name}{wanted})")
    return missing, notes


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets ``specifier`` (e.g. ``>=8.3,<10``), by ``packaging`` (pip's own copy will do)."""
    for module in ("packaging.specifiers", "pip._vendor.packaging.specifiers"):
        try:
            specifier_set: Any = importlib.import_module(module).SpecifierSet
        except ImportError:
            continue
        try:
            return bool(specifier_set(specifier).contains(version, prereleases=True))
        except ValueError:  # a version or specifier packaging cannot read: nothing to say about it
            return True
    pin = _PIN.match(specifier)
    return pin is None or pin.group(1) == version  # without packaging, only an exact pin can be judged


def _constraints() -> str:
    """Every installed distribution at its version, so installing the missing ones changes none of them."""
    pins = {_normal(dist.metadata["Name"]): dist.version for dist in metadata.distributions() if dist.metadata["Name"]}
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def main() -> int:
    missing, notes = plan(requirements(), installed_version)
    for note in notes:
        print(note, file=sys.stderr)
    if not missing:
        return 0
    print(f"kvconform: installing what this image lacks: {' '.join(missing)}", file=sys.stderr)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="kvconform-constraints-") as constraints:
        constraints.write(_constraints())
        constraints.flush()
        done = subprocess.run([sys.executable, *PIP, "--constraint", constraints.name, *missing], check=False)
    if done.returncode != 0:
        print(f"kvconform: could not install {' '.join(missing)} beside this image's packages (pip exit "
              f"{done.returncode}); add them to the image", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
