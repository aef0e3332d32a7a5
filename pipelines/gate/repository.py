"""The vLLM checkout a change lives in, read through git: refs, changed files, sources at a commit.

File names, refs and sources come from a pull request and are untrusted: git is
always called with an argument list, refs are resolved to commit ids before use,
paths only ever travel after ``--``, and the working tree is never read.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

# A path Python can import as a module; only such names are read from the tree.
_MODULE_FILE = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*/)*[A-Za-z_][A-Za-z0-9_]*\.py")
_COMMIT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


class GateError(Exception):
    """A problem with the gate's input (repository, refs, checkout layout): one line."""


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """Run git in ``repo`` with an argument list; a failure is a GateError with git's message."""
    try:
        proc = subprocess.run(["git", "-c", "core.fsmonitor=false", *args], cwd=repo, input=stdin,
                              capture_output=True, check=False)
    except FileNotFoundError:
        raise GateError("git is not installed (needed to read the change)") from None
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GateError(f"git {args[0]} failed: {message[-1] if message else f'exit {proc.returncode}'}")
    return proc.stdout


def check_repository(repo: Path) -> Path:
    """``repo`` as an absolute path, or a GateError saying why it is not a git repository."""
    repo = Path(repo).expanduser()
    if not repo.is_dir():
        raise GateError(f"--repo {repo}: no such directory")
    try:
        git(repo, "rev-parse", "--git-dir")
    except GateError:
        raise GateError(f"--repo {repo}: not a git repository") from None
    return repo.resolve()


def resolve_commit(repo: Path, rev: str, flag: str = "ref") -> str:
    """The commit id ``rev`` names; untrusted text never reaches git as an option."""
    if not rev or rev.startswith("-") or any(c in rev for c in "\0\n\r"):
        raise GateError(f"{flag} {rev!r}: not a valid git revision")
    try:
        out = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    except GateError:
        raise GateError(f"{flag} {rev!r}: no such commit in {repo}") from None
    sha = out.decode().strip()
    if not _COMMIT_ID.fullmatch(sha):
        raise GateError(f"{flag} {rev!r}: git answered {sha!r}, not a commit id")
    return sha


def fork_point(repo: Path, base: str, head: str) -> str:
    """The commit ``head`` forked from ``base`` at (both commit ids): what the change is measured against."""
    try:
        return git(repo, "merge-base", base, head).decode().strip()
    except GateError:
        return base  # unrelated histories: compare the two trees directly


def changed_files(repo: Path, base: str, head: str, fork: str | None = None) -> list[str]:
    """Files changed on ``head`` since it forked from ``base`` (both commit ids; ``fork``: where, when known), verbatim.

    Renames are listed as a deletion plus an addition, so moving a connector's
    file away still names the old path.
    """
    fork = fork or fork_point(repo, base, head)
    out = git(repo, "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", fork, head, "--")
    return [name.decode("utf-8", "surrogateescape") for name in out.split(b"\0") if name]


def read_python_sources(repo: Path, commit: str, roots: Iterable[str]) -> dict[str, str]:
    """path -> source of every importable ``.py`` file under ``roots`` at ``commit``."""
    listing = git(repo, "ls-tree", "-r", "-z", "--name-only", commit, "--", *roots)
    paths = [p for p in (n.decode("utf-8", "replace") for n in listing.split(b"\0") if n)
             if _MODULE_FILE.fullmatch(p)]
    if not paths:
        return {}
    # Only module-shaped names (checked above) go into the batch request, one per line.
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    blob = git(repo, "cat-file", "--batch", stdin=request)
    sources: dict[str, str] = {}
    pos = 0
    for path in paths:
        header_end = blob.index(b"\n", pos)
        header = blob[pos:header_end].split()
        if len(header) != 3 or header[1] != b"blob":
            pos = header_end + 1
            continue
        size = int(header[2])
        sources[path] = blob[header_end + 1:header_end + 1 + size].decode("utf-8", "replace")
        pos = header_end + 1 + size + 1
    return sources
