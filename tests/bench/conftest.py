"""Fixtures for the bench's tests: ``kvconform bench`` run in-process."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvconform.conformance import cli


@dataclass
class Result:
    status: int
    out: str
    err: str


@pytest.fixture
def bench(capsys):
    """``bench(*args) -> Result``: ``kvconform bench ARGS`` through ``conformance.cli.main``."""

    def run(*args: str) -> Result:
        try:
            status = cli.main(["bench", *args])
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
        captured = capsys.readouterr()
        return Result(status, captured.out, captured.err)

    return run
