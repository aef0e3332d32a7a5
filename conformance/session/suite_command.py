"""The command line of a conformance suite run, built in one place for everything that starts one.

The smoke run, the Buildkite steps, the PR gate and the project's own tests all start
``python -m pytest --pyargs kvconform.conformance`` with a platform, connectors and
result files. ``SuiteCommand`` holds what differs between them and writes the argument
list in one fixed order; ``text()`` is the same list as one shell line. Values are
glued to their option (``--connector=NAME``), so a connector name from a checkout or
a config is never read as an option of its own.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .target import PACKAGE

MAX_WORKER_RESTARTS = 16  # a worker a connector crashes is replaced, its test failed, and the run goes on
NO_CACHE = "no:cacheprovider"  # ``-p``: the run writes no .pytest_cache into the folder it runs in


@dataclass(frozen=True)
class SuiteCommand:
    """One run of the conformance suite: what it tests, how it runs, where its results go."""

    platform: str
    connectors: Sequence[str] = ()  # empty: every connector the suite knows
    # the words that start Python: its path and options (``-P``), after ``env NAME=VALUE`` where the run sets them
    python: Sequence[str] = (sys.executable,)
    attn_backends: Sequence[str] = ()
    plugins: Sequence[str] = ()  # ``-p NAME`` each, in order
    options: Sequence[str] = ()  # other pytest or kvconform options, as given (``-q``, ``--kvconform-strict``)
    keyword: str | None = None  # ``-k``
    workers: int | str | None = None  # ``-n`` (xdist), with ``--max-worker-restart``; None: no xdist
    max_worker_restarts: int = MAX_WORKER_RESTARTS
    report_skips: bool = False  # ``-rs``: each skip's reason in the summary
    junitxml: Path | str | None = None
    results_json: Path | str | None = None  # ``--kvconform-json``
    extra: Sequence[str] = ()  # the caller's own arguments, last

    def argv(self) -> list[str]:
        """The command as an argument list, never a shell line."""
        words = [*self.python, "-m", "pytest", "--pyargs", PACKAGE, f"--platform={self.platform}"]
        words += [f"--connector={name}" for name in self.connectors]
        words += [f"--attn-backend={backend}" for backend in self.attn_backends]
        words += [word for plugin in self.plugins for word in ("-p", plugin)]
        words += self.options
        if self.keyword:
            words += ["-k", self.keyword]
        if self.workers is not None:
            words += ["-n", str(self.workers), f"--max-worker-restart={self.max_worker_restarts}"]
        if self.report_skips:
            words.append("-rs")
        if self.junitxml is not None:
            words.append(f"--junitxml={self.junitxml}")
        if self.results_json is not None:
            words.append(f"--kvconform-json={self.results_json}")
        return [*words, *self.extra]

    def text(self) -> str:
        """The command as one shell line, every word quoted where the shell would read it otherwise."""
        return shlex.join(self.argv())
