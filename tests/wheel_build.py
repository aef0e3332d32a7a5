"""This checkout's wheel, built as the bootstrap step builds it (``pip wheel --no-deps``), from a copy.

From a copy: setuptools writes kvconform.egg-info into the tree it builds, and a stale one left in the
checkout would shadow the installed entry points for every run started there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.load import stretched

ROOT = Path(__file__).resolve().parents[1]
# what a build never reads: git, the environments, reports, caches
NOT_COPIED = (".git", ".venv*", ".oldest-tools", "out", "__pycache__", "*.egg-info", ".mypy_cache", ".pytest_cache")


def build_wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source") / "kvconform"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_COPIED))
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out), str(source)], capture_output=True, text=True, timeout=stretched(300))
    assert build.returncode == 0, build.stderr
    (wheel,) = out.glob("kvconform-*.whl")
    return wheel
