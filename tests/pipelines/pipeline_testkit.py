"""Helpers for the pipeline generator's tests (a uniquely named module: tests import it by name).

``FakeBin`` puts recording stand-ins for the programs a step runs (python3, recorded
as ``pytest`` when it runs ``-P -m pytest`` and as ``kvconform`` for ``-P -m kvconform``, buildkite-agent, docker, rm, a
wrapper) first on PATH, so a generated
step's commands can be *executed* by bash and what each program received checked
word for word, without running any of them for real (a fake ``rm`` also means an
injected ``rm -rf`` could delete nothing).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

from kvconform.pipelines.install import wheel_path
from tests.load import stretched

# A recording stand-in, in bash so that a test running many of them stays fast. Each call
# appends one record to $FAKE_LOG: its name and arguments, NUL-separated, ended by \x1e.
RECORDER = r"""#!/usr/bin/env bash
prog=$(basename "$0")
if [ "$prog" = python3 ] && [ "${1:-} ${2:-} ${3:-}" = "-P -m pytest" ]; then prog=pytest; shift 3; fi
if [ "$prog" = python3 ] && [ "${1:-} ${2:-} ${3:-}" = "-P -m kvconform" ]; then prog=kvconform; shift 3; fi
{ printf '%s\0' "$prog" "$@"; printf '\036'; } >> "$FAKE_LOG"
if [ "$prog" = buildkite-agent ] && [ "${1:-}" = annotate ]; then cat > "$FAKE_LOG.annotation"; fi
if [ "$prog" = buildkite-agent ] && [ "${1:-} ${2:-} ${3:-} ${4:-}" = "step get outcome --step" ]; then
  awk -v key="$5" '$1 == key { print $2 }' "$FAKE_LOG.outcomes"
fi
if [ "$prog" = wrap ]; then
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
  shift
  if [ "${FAKE_WRAP_MODE:-}" = string ]; then exec sh -c "$1"; else exec "$@"; fi
fi
status_var="FAKE_$(printf '%s' "$prog" | tr 'a-z-' 'A-Z_')_STATUS"
exit "${!status_var:-0}"
"""

WHEEL_FETCH = ["artifact", "download", wheel_path()]

FAKE_PROGRAMS = ("python3", "kvconform", "buildkite-agent", "docker", "rm", "wrap")


class FakeBin:
    def __init__(self, root: Path):
        self.dir = root / "fakebin"
        self.dir.mkdir()
        self.log = root / "calls.log"
        self.cwd = root / "checkout"
        self.cwd.mkdir()
        for name in FAKE_PROGRAMS:
            path = self.dir / name
            path.write_text(RECORDER)
            path.chmod(path.stat().st_mode | stat.S_IXUSR)

    @property
    def wrap(self) -> str:
        return str(self.dir / "wrap")

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": f"{self.dir}:{os.environ['PATH']}", "FAKE_LOG": str(self.log),
                "HOME": str(self.cwd), **extra}

    def calls(self, prog: str | None = None) -> list[dict]:
        if not self.log.exists():
            return []
        records = []
        for raw in self.log.read_bytes().decode().split("\x1e")[:-1]:
            name, *argv = raw.split("\0")[:-1]
            records.append({"prog": name, "argv": argv})
        return [r for r in records if prog is None or r["prog"] == prog]

    def agent_calls(self) -> list[list[str]]:
        """What ``buildkite-agent`` was asked, less the fetch of kvconform's wheel that starts every step."""
        return [c["argv"] for c in self.calls("buildkite-agent") if c["argv"][:3] != WHEEL_FETCH]

    def set_outcomes(self, outcomes: dict[str, str]) -> None:
        """What ``buildkite-agent step get outcome --step KEY`` answers (nothing for a key not given)."""
        Path(f"{self.log}.outcomes").write_text("".join(f"{k} {v}\n" for k, v in outcomes.items()))

    def annotation(self) -> str:
        return Path(f"{self.log}.annotation").read_text()

    def run_commands(self, commands: list[str], **env: str) -> subprocess.CompletedProcess:
        """Run a step's commands as the agent would: upload un-escapes ``$$``, then ``bash -e -c``."""
        script = "\n".join(uploaded(command) for command in commands)
        return subprocess.run(["bash", "-e", "-c", script], cwd=self.cwd, env=self.env(**env),
                              capture_output=True, text=True, timeout=stretched(60))


def uploaded(command: str) -> str:
    """What ``buildkite-agent pipeline upload`` leaves of a command the generator wrote.

    Upload interpolates ``$NAME``/``${...}`` and turns ``$$`` into ``$``; a generated
    command must contain no ``$`` outside ``$$`` pairs, so upload changes nothing else.
    """
    assert "$" not in re.sub(r"\$\$", "", command), f"a `$` upload would interpolate: {command!r}"
    return command.replace("$$", "$")


def step_commands(pipeline: dict) -> list[tuple[dict, str]]:
    """(step, command) for every command of every step, nested groups included."""
    out = []
    for step in pipeline["steps"]:
        for inner in step.get("steps", [step]):
            out += [(inner, command) for command in inner.get("commands", [])]
    return out


def conformance_steps(pipeline: dict) -> list[dict]:
    return [inner for step in pipeline["steps"] for inner in step.get("steps", [])]
