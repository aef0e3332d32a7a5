"""A connector author's first commands work as printed, in a fresh shell, after the README's set-up.

``test_docs_commands`` checks each documented command against the code; this runs
some for real where a reader would: a bash with none of this test run's
environment (no ``VIRTUAL_ENV``, no venv's ``bin`` on ``PATH``, no ``PYTHONPATH``,
no pytest variables), in the repository's root, that first runs the README's
set-up block (the one that activates ``.venv``) and then the commands of
docs/testing-your-connector.md, each as printed plus options that keep it cheap
(``--collect-only``). The block's ``make venv`` is the one line not run: it
builds ``.venv``, which exists wherever the project's tests run, and would rebuild
it whenever the Makefile is newer than its stamp.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_docs_commands import REPO, commands_of
from tests.load import stretched

README = REPO / "README.md"
AUTHORS_PAGE = REPO / "docs" / "testing-your-connector.md"
VENV = REPO / ".venv"
BUILDS_THE_VENV = "make venv"
CHEAP = ("--collect-only", "-q", "-p", "no:cacheprovider")  # collect, list the ids, write nothing
FENCE = re.compile(r"^```(\w*)\s*$")


def setup_block() -> list[str]:
    """The README's shell block that activates ``.venv``: its command lines."""
    blocks, current = [], None
    for line in README.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line.strip())
    [block] = [b for b in blocks if any("bin/activate" in line for line in b)]
    return [line for line in block if line and not line.startswith("#")]


def clean_env() -> dict[str, str]:
    """A fresh login's environment: this run's venv, paths and pytest settings left out."""
    venvs = {Path(sys.prefix) / "bin", VENV / "bin"}
    path = [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
            if entry and Path(entry).resolve() not in {v.resolve() for v in venvs}
            and not Path(entry).resolve().is_relative_to(REPO)]
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    return {**{k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST_")},
            "PATH": os.pathsep.join(path)}


def in_fresh_shell(command: str) -> subprocess.CompletedProcess:
    setup = [line for line in setup_block() if line != BUILDS_THE_VENV]
    script = "\n".join(["set -e", *setup, command])
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=clean_env(), capture_output=True, text=True,
                          timeout=stretched(300))


def as_printed(command, *extra: str) -> str:
    words = [f"{key}={shlex.quote(value)}" for key, value in command.env] + [shlex.quote(w) for w in command.argv]
    return " ".join([*words, *extra])


def test_the_setup_activates_the_venv_the_make_targets_build():
    lines = setup_block()
    assert BUILDS_THE_VENV in lines and ". .venv/bin/activate" in lines, lines
    assert lines.index(BUILDS_THE_VENV) < lines.index(". .venv/bin/activate"), lines
    assert set(lines) <= {BUILDS_THE_VENV, ". .venv/bin/activate"}, f"a set-up line this test does not run: {lines}"


def test_the_fresh_shell_has_no_venv_of_its_own():
    """Without the set-up the shell's ``python`` is not .venv's: what the set-up does is what the next test needs."""
    done = subprocess.run(["bash", "-c", "command -v python || true"], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=stretched(30))
    assert not done.stdout.strip().startswith(str(VENV)), done.stdout
    assert "VIRTUAL_ENV" not in clean_env()


def _first(doc: Path, tool: str):
    return next(c for c in commands_of(doc) if c.tool == tool and any("dict_connector" in w for w in c.argv))


# (the doc, the tool of its first command naming the worked example, options added to it)
FIRST_COMMANDS = {"pytest": (AUTHORS_PAGE, CHEAP), "kvconform": (README, ())}


@pytest.mark.parametrize("tool", list(FIRST_COMMANDS))
def test_the_authors_first_command_runs_as_printed_after_the_setup(tool):
    if not (VENV / "bin" / "python").is_file():
        pytest.skip(f"the README's set-up builds {VENV} (`make venv`), and it is not built here")
    doc, extra = FIRST_COMMANDS[tool]
    command = _first(doc, tool)
    done = in_fresh_shell(as_printed(command, *extra))
    output = done.stdout[-2000:] + done.stderr[-2000:]
    assert done.returncode == 0, f"{doc.name}:{command.line}: {command.text}\n{output}"
    if tool == "pytest":
        assert any("::" in line and "DictConnector" in line for line in done.stdout.splitlines()), output
        assert re.search(r"^\d+ tests? collected", done.stdout, re.M), output
    else:
        assert "1 file checked, 0 findings" in done.stdout, output
