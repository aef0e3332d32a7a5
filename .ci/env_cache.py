"""The project's environments, built once per recipe and kept outside the clone, as CI systems cache dependencies.

Building an environment takes minutes (vLLM, torch, NIXL: gigabytes), and a clean clone, which is what
``.ci/run`` starts from, used to build every one of them again. ``make venv`` (and each ``venv-*`` target)
runs ``env_cache.py FOLDER --inputs FILE... [--editable]``, which

1. hashes the environment's recipe: the commands of the Makefile's ``env-build/FOLDER`` target as make expands
   them (``make -n``: the macro with its variables' values; shell comments aside), the input files
   (``pyproject.toml`` counts by its dependency lists only) and the Python that builds it. An edit of another
   target, a comment or pyproject's other fields leaves the hash as it is;
2. reuses ``$KVCONFORM_ENV_CACHE/<name>-<hash>`` (default ``~/.cache/kvconform/envs``) when a complete one
   exists there, else builds it there with ``make env-build/FOLDER ENV_DIR=<that folder>``. A venv is not
   relocatable (its scripts name its path), so it is built where it stays, under an exclusive lock
   (``<name>-<hash>.lock``): a second clone wanting the same recipe waits, then reuses it. A folder is
   complete once its recipe wrote its stamp and this script its recipe (``.kvconform-recipe``, written last),
   so a failed or interrupted build is never reused: it is removed, and built again next time;
3. makes ``FOLDER`` in the clone a link to it, and, with ``--editable``, installs this clone's kvconform into it
   (``make env-clone/FOLDER``: editable, without dependencies) unless it already runs this clone's code;
4. keeps the two most recently used environments of each name and removes older ones nobody is building.

``KVCONFORM_ENV_CACHE=off`` builds in the clone as before: ``FOLDER`` is a folder, rebuilt over when its
recipe changes. A folder already in the clone (not a link) is kept and treated the same way.
Every outcome is one line: ``kvconform: environment .venv: reused <path> (recipe <hash>)`` or ``built afresh``
(``.ci/run`` sets ``KVCONFORM_ENV_LOG_PREFIX=ci``). ``--remove-cache`` (``make clean-env-cache``) removes the
cache. Bad input is one line and exit 2; a failed build, exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
CACHE_VARIABLE = "KVCONFORM_ENV_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "kvconform" / "envs"
OFF = "off"
STAMP = ".kvconform-installed"  # each recipe's last command writes it
RECIPE = ".kvconform-recipe"  # what was hashed; written after the build, so its presence means complete
LAST_USED = ".kvconform-last-used"
PLACEHOLDER = "<ENV_DIR>"  # the folder in the hashed commands, the same wherever it is built (never a make prefix)
HASH_CHARS = 12
KEEP_PER_NAME = 2
# inputs read in part: file name -> what of it counts
PYPROJECT_FIELDS = ("dependencies", "optional-dependencies")
# what a process started by ``--editable``'s check prints: the kvconform install's direct_url.json, or nothing
DIRECT_URL = """
import importlib.metadata as m
try:
    print(m.distribution("kvconform").read_text("direct_url.json") or "")
except m.PackageNotFoundError:
    print("")
"""


class BadInput(Exception):
    """The command cannot start (one line, exit 2)."""


class BuildFailed(Exception):
    """An environment could not be built or made this clone's (one line, exit 1)."""


def say(folder: str, text: str) -> None:
    print(f"{os.environ.get('KVCONFORM_ENV_LOG_PREFIX') or 'kvconform'}: environment {folder}: {text}", flush=True)


def make(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    """make in the repository root; command-line variables of a calling make reach it through MAKEFLAGS, but not
    its jobserver, whose descriptors this process does not pass on (make would warn that it is unavailable)."""
    env = dict(os.environ)
    if "MAKEFLAGS" in env:
        env["MAKEFLAGS"] = re.sub(r"\s*--jobserver-(auth|fds)=\S+", "", env["MAKEFLAGS"])
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env, text=True,
                          capture_output=capture)


# --- the recipe and its hash --------------------------------------------------------------------------------------

def build_commands(folder: str) -> str:
    """The commands that build ``folder``, as make expands them, for any place it is built in."""
    done = make("-n", f"env-build/{folder}", f"ENV_DIR={PLACEHOLDER}", capture=True)
    if done.returncode != 0:
        last = (done.stderr.strip() or "(no output)").splitlines()[-1]
        raise BadInput(f"no recipe for {folder}: `make -n env-build/{folder}` failed: {last}")
    return "\n".join(line for line in done.stdout.splitlines() if not line.lstrip().startswith("#"))


def pyproject_dependencies(text: str) -> str:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the whole file counts
        return text
    project = tomllib.loads(text).get("project", {})
    return json.dumps({field: project.get(field) for field in PYPROJECT_FIELDS}, sort_keys=True, indent=1)


# input file name -> what of its text counts (any other file counts whole)
READ_IN_PART = {"pyproject.toml": pyproject_dependencies}


def input_text(name: str) -> str:
    path = ROOT / name
    if not path.is_file():
        raise BadInput(f"input {name}: no such file in {ROOT}")
    return READ_IN_PART.get(path.name, lambda text: text)(path.read_text(encoding="utf-8"))


def python_identity() -> str:
    """The Python that builds the environment (the Makefile's PYTHON runs this script)."""
    return f"{sys.implementation.name} {sys.version} on {platform.machine()}"


@dataclass(frozen=True)
class Recipe:
    text: str

    @classmethod
    def of(cls, folder: str, inputs: Sequence[str]) -> Recipe:
        parts = [f"## make -n env-build/{folder}\n{build_commands(folder)}"]
        parts += [f"## {name}\n{input_text(name)}" for name in sorted(set(inputs))]
        parts.append(f"## python\n{python_identity()}")
        return cls("\n".join(parts) + "\n")

    @property
    def key(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:HASH_CHARS]


# --- building, locking, linking -----------------------------------------------------------------------------------

def complete(path: Path, recipe: Recipe) -> bool:
    record = path / RECIPE
    return (path / STAMP).is_file() and record.is_file() and record.read_text(encoding="utf-8") == recipe.text


def build(folder: str, path: Path, recipe: Recipe) -> None:
    """Runs the recipe into ``path``; a failed build leaves nothing that counts as complete."""
    (path / RECIPE).unlink(missing_ok=True)
    (path / STAMP).unlink(missing_ok=True)
    started = time.monotonic()
    done = make(f"env-build/{folder}", f"ENV_DIR={path}")
    if done.returncode != 0:
        raise BuildFailed(f"`make env-build/{folder} ENV_DIR={path}` exited {done.returncode}")
    if not (path / STAMP).is_file():
        raise BuildFailed(f"`make env-build/{folder}` finished without writing {path / STAMP}")
    (path / RECIPE).write_text(recipe.text, encoding="utf-8")
    say(folder, f"built afresh {path} (recipe {recipe.key}) in {time.monotonic() - started:.0f} s")


@contextlib.contextmanager
def locked(lock: Path, folder: str, key: str) -> Iterator[None]:
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(folder, f"waiting for another clone's build of recipe {key} ({lock})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def link(folder: Path, entry: Path) -> None:
    """``folder`` becomes a link to ``entry``, replaced in one step (a process starting now sees one or the other)."""
    if folder.is_symlink() and os.readlink(folder) == str(entry):
        return
    new = folder.with_name(f"{folder.name}.link-{os.getpid()}")
    new.unlink(missing_ok=True)
    new.symlink_to(entry, target_is_directory=True)
    os.replace(new, folder)


def installed_from(environment: Path) -> Path | None:
    """The checkout the environment's kvconform is an editable install of; None if it is not one."""
    done = subprocess.run([str(environment / "bin" / "python"), "-I", "-c", DIRECT_URL], cwd="/",
                          capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    direct = json.loads(done.stdout)
    if not direct.get("dir_info", {}).get("editable"):
        return None
    return Path(unquote(urlparse(direct["url"]).path)).resolve()


def make_this_clones(folder: str) -> None:
    """This clone's kvconform in the environment, so that it never runs another clone's code."""
    environment = ROOT / folder
    if installed_from(environment) == ROOT:
        return
    done = make(f"env-clone/{folder}")
    if done.returncode != 0:
        raise BuildFailed(f"`make env-clone/{folder}` exited {done.returncode}")
    found = installed_from(environment)
    if found != ROOT:
        raise BuildFailed(f"after `make env-clone/{folder}`, {folder}'s kvconform is from {found}, not {ROOT}")
    say(folder, f"kvconform installed from this clone ({ROOT}; editable, without dependencies)")


def last_used(path: Path) -> float:
    marker = path / LAST_USED
    return (marker if marker.exists() else path).stat().st_mtime


def prune(cache: Path, name: str, current: Path) -> None:
    """Removes all but the ``KEEP_PER_NAME`` most recently used environments of ``name``; none that is locked."""
    entries = [path for path in cache.glob(f"{name}-*")
               if path.is_dir() and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{{HASH_CHARS}}}", path.name)]
    older = sorted((path for path in entries if path != current), key=last_used, reverse=True)[KEEP_PER_NAME - 1:]
    for path in older:
        lock = path.with_name(f"{path.name}.lock")
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being built or made a clone's now
            shutil.rmtree(path)
            lock.unlink()
        print(f"env-cache: removed {path}: {KEEP_PER_NAME} newer environments of {name} were used since",
              flush=True)


def cache_root() -> Path | None:
    value = os.environ.get(CACHE_VARIABLE, "")
    if value == OFF:
        return None
    return Path(value).expanduser().resolve() if value else DEFAULT_CACHE


def in_clone(folder: str, recipe: Recipe, why: str, editable: bool) -> None:
    path = ROOT / folder
    if path.is_symlink():
        say(folder, f"{why}: the link to {os.readlink(path)} is removed (the cached environment is kept)")
        path.unlink()
    if complete(path, recipe):
        say(folder, f"reused in the clone (recipe {recipe.key}; {why})")
    else:
        say(folder, f"building in the clone (recipe {recipe.key}; {why})")
        path.mkdir(parents=True, exist_ok=True)
        build(folder, path, recipe)
    if editable:
        make_this_clones(folder)


def cached(folder: str, recipe: Recipe, cache: Path, editable: bool) -> None:
    name = Path(folder).name.lstrip(".")
    entry = cache / f"{name}-{recipe.key}"
    cache.mkdir(parents=True, exist_ok=True)
    with locked(entry.with_name(f"{entry.name}.lock"), folder, recipe.key):
        if complete(entry, recipe):
            say(folder, f"reused {entry} (recipe {recipe.key})")
        else:
            if entry.exists():
                say(folder, f"{entry} is incomplete (a build that failed or was stopped): removing it")
                shutil.rmtree(entry)
            say(folder, f"building afresh in {entry} (recipe {recipe.key}): no complete one in {cache}")
            entry.mkdir()
            try:
                build(folder, entry, recipe)
            except BuildFailed:
                shutil.rmtree(entry, ignore_errors=True)
                raise
        link(ROOT / folder, entry)
        if editable:  # under the lock: two clones' installs into one environment must not interleave
            make_this_clones(folder)
        (entry / LAST_USED).touch()
    prune(cache, name, entry)


def ensure(folder: str, inputs: Sequence[str], editable: bool) -> None:
    recipe = Recipe.of(folder, inputs)
    path = ROOT / folder
    cache = cache_root()
    if cache is None:
        in_clone(folder, recipe, f"{CACHE_VARIABLE}={OFF}", editable)
    elif path.exists() and not path.is_symlink():
        in_clone(folder, recipe, f"a folder of this clone, not a link into {cache} (remove it to use the cache)",
                 editable)
    else:
        cached(folder, recipe, cache, editable)


def remove_cache() -> None:
    cache = cache_root()
    if cache is None:
        raise BadInput(f"{CACHE_VARIABLE}={OFF}: environments are built in the clone; there is no cache to remove")
    if not cache.exists():
        print(f"env-cache: {cache} does not exist: nothing to remove")
        return
    count = sum(1 for path in cache.iterdir() if path.is_dir())
    shutil.rmtree(cache)
    print(f"env-cache: removed {cache} ({count} environments); the clones' links to them go dangling until "
          "their next make")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=".ci/env_cache.py", description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", help="the environment's folder in the clone (.venv, .oldest-tools, ...)")
    parser.add_argument("--inputs", nargs="*", default=[], metavar="FILE",
                        help="files, relative to the repository, whose contents the environment depends on")
    parser.add_argument("--editable", action="store_true",
                        help="the environment holds kvconform editable: make it this clone's (make env-clone/FOLDER)")
    parser.add_argument("--remove-cache", action="store_true", help=f"remove ${CACHE_VARIABLE}'s folder")
    args = parser.parse_args(argv)
    if args.remove_cache == bool(args.folder):
        raise BadInput("give an environment's folder, or --remove-cache")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        if args.remove_cache:
            remove_cache()
        else:
            ensure(args.folder, args.inputs, args.editable)
    except BadInput as exc:
        print(f"env-cache: error: {exc}", file=sys.stderr)
        return 2
    except BuildFailed as exc:
        print(f"env-cache: FAILED: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"env-cache: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
