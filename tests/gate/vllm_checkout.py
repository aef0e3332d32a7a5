"""A throwaway vLLM checkout for the gate's tests: the installed vLLM's real ``kv_transfer`` tree in git."""

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
# Files outside kv_transfer the tests change, copied from the installed vLLM.
EXTRA_FILES = ("vllm/v1/kv_cache_layout.py", "vllm/v1/attention/backends/cpu_attn.py")

# Git that ignores the machine's own configuration (signing, hooks, identity).
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "gate-test", "GIT_AUTHOR_EMAIL": "gate@test",
           "GIT_COMMITTER_NAME": "gate-test", "GIT_COMMITTER_EMAIL": "gate@test"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


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
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", message)
        return git(self.path, "rev-parse", "HEAD")

    def touch(self, *paths: str) -> str:
        """Append a comment to existing files and commit."""
        return self.commit({p: (self.path / p).read_text() + "\n# touched\n" for p in paths})


@dataclass
class GateResult:
    status: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


def build_template(root: Path, extra_files: tuple[str, ...] = EXTRA_FILES) -> Path:
    """A git repository at ``root`` laid out like vLLM: the installed kv_transfer tree plus ``extra_files``."""
    shutil.copytree(VLLM_SOURCE / "distributed" / "kv_transfer", root / KV_TRANSFER,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in extra_files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(VLLM_SOURCE.parent / name, root / name)
    (root / "README.md").write_text("# vLLM (a test copy)\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return root


def clone_template(template: Path, tmp_path: Path) -> VllmRepo:
    """A private clone of ``template``, so a test can commit without others seeing it."""
    path = tmp_path / "vllm"
    git(tmp_path, "clone", "-q", str(template), str(path))
    return VllmRepo(path, git(path, "rev-parse", "HEAD"))
