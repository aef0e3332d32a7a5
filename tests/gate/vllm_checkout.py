"""A throwaway vLLM checkout for the gate's tests: the installed vLLM's Python sources in git.

As a git clone of vLLM has them: every ``.py`` file of the package and nothing the
build makes (compiled extensions, data files it ships, ``_version.py``), so the
gate's overlay has to borrow those from the installed build, as it must for a real checkout.

Also the changes the gate is tried on (``change_example``): ExampleConnector's load line, as vLLM PR #51806
fixed it, with a comment beside it or broken again. The project's tests and ``.ci/wheel_check.py`` share them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

VLLM_SOURCE = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
KV_TRANSFER = "vllm/distributed/kv_transfer"
CONNECTORS = f"{KV_TRANSFER}/kv_connector"
FACTORY = f"{CONNECTORS}/factory.py"
EXAMPLE = f"{CONNECTORS}/v1/example_connector.py"
# ExampleConnector's load as vLLM PR #51806 fixed it; the line that PR replaced; the load of vLLM issue #42924
FIXED = "kv_cache = kv_cache_cpu.to(kv_cache_layer.device, non_blocking=True)"
REVERTED = 'kv_cache = kv_cache_cpu.to("cuda", non_blocking=True)'
CUDA_LOAD = "kv_cache = kv_cache_cpu.cuda()"
COMMENTED = FIXED + "  # loads onto the layer's own device"  # a change that changes nothing
# The round-trips a change to that load risks, without the layouts, MLA, scenarios and other devices (-k)
ROUNDTRIP_ONLY = "test_roundtrip and not layout and not mla and not scenario and not other_device"
# What a test clone checks out (with the files of every folder above them).
SPARSE_FOLDERS = (KV_TRANSFER, "vllm/v1/attention/backends")

# Git that ignores the machine's own configuration (signing, hooks, identity).
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "gate-test", "GIT_AUTHOR_EMAIL": "gate@test",
           "GIT_COMMITTER_NAME": "gate-test", "GIT_COMMITTER_EMAIL": "gate@test"}


class GitFailed(RuntimeError):
    """A git command of a test's setup failed; its message carries git's own words."""


def git(repo: Path, *args: str, strip: bool = True) -> str:
    """git's output; a failure names the command and quotes git's stderr (a full disk once showed as a bare
    CalledProcessError, which keeps stderr out of its message)."""
    done = subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise GitFailed(f"git {' '.join(args)} (in {repo}) exited {done.returncode}: "
                        f"{done.stderr.strip() or '(no stderr)'}")
    return done.stdout.strip() if strip else done.stdout


def untracked(repo: Path) -> str:
    """Every file of the checkout git does not track, ignored ones included (empty: the tree is as committed)."""
    return git(repo, "status", "--porcelain", "--ignored", "-z", strip=False)


def installed_connector_names() -> list[str]:
    """The names the installed vLLM registers, read with a regex: an oracle independent of the gate's ast."""
    text = (VLLM_SOURCE.parent / FACTORY).read_text()
    return re.findall(r"register_connector\(\s*\"([^\"]+)\"", text)


@dataclass
class VllmRepo:
    path: Path
    base: str  # the commit every test's change starts from

    def commit(self, files: dict[str, str | None], message: str = "change") -> str:
        """Write (or, for None, delete) ``files`` and commit; returns the new commit id."""
        for name, text in files.items():
            target = self.path / name
            if text is None:
                git(self.path, "rm", "-q", "--cached", "--sparse", "--", name)
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        git(self.path, "add", "-A", "--sparse")
        git(self.path, "commit", "-q", "-m", message)
        return git(self.path, "rev-parse", "HEAD")

    def touch(self, *paths: str) -> str:
        """Append a comment to existing files and commit."""
        return self.commit({p: self.text(p) + "\n# touched\n" for p in paths})

    def text(self, path: str) -> str:
        """A file's content at HEAD (the clone checks out only part of the tree)."""
        return git(self.path, "show", f"HEAD:{path}", strip=False)


def change_example(repo: VllmRepo, line: str, message: str = "change ExampleConnector's load") -> str:
    """Commit ExampleConnector's module with its load line (``FIXED``) replaced by ``line``; returns the commit.

    The installed vLLM must have the fixed line, once, for the change to be the one named."""
    source = repo.text(EXAMPLE)
    if source.count(FIXED) != 1:
        raise ValueError(f"{EXAMPLE} holds {FIXED!r} {source.count(FIXED)} times, not once: "
                         "the installed vLLM is not the one these changes are written for")
    return repo.commit({EXAMPLE: source.replace(FIXED, line)}, message=message)


@dataclass
class GateResult:
    status: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


def _as_in_git(path: Path) -> bool:
    """Whether a git clone of vLLM has this installed file: Python sources the build did not generate."""
    from kvconform.conformance.vllm_install.import_graph import compile_glob
    from kvconform.pipelines.gate.overlay import GENERATED

    relative = path.relative_to(VLLM_SOURCE.parent).as_posix()
    return (path.suffix == ".py" and "__pycache__" not in path.parts
            and not any(compile_glob(pattern).fullmatch(relative) for pattern in GENERATED))


def build_template(root: Path) -> Path:
    """A git repository at ``root`` laid out like vLLM: the installed package's Python sources, as git has them."""
    for source in VLLM_SOURCE.rglob("*.py"):
        if _as_in_git(source):
            target = root / source.relative_to(VLLM_SOURCE.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    (root / "README.md").write_text("# vLLM (a test copy)\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return root


def clone_template(template: Path, tmp_path: Path) -> VllmRepo:
    """A private clone of ``template``, so a test can commit without others seeing it.

    Only the folders tests edit are checked out (writing all 2600 files costs seconds
    a test); commits still hold the whole tree, which is all the gate reads.
    """
    path = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", "--no-checkout", str(template), str(path))
    git(path, "sparse-checkout", "set", "--cone", *SPARSE_FOLDERS)
    git(path, "checkout", "-q", "main")
    return VllmRepo(path, git(path, "rev-parse", "HEAD"))
