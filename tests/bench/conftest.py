"""Fixtures for the bench's tests: ``kvconform bench`` run in-process, and the benchmark scripts imported."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from kvconform.conformance import cli


@dataclass
class Result:
    status: int
    out: str
    err: str


@pytest.fixture
def bench(capsys):
    """``bench(*args) -> Result``: ``kvconform bench ARGS`` through ``kvconform.conformance.cli.main``."""

    def run(*args: str) -> Result:
        try:
            status = cli.main(["bench", *args])
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
        captured = capsys.readouterr()
        return Result(status, captured.out, captured.err)

    return run


BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@contextmanager
def benchmark_script(filename: str) -> Iterator[ModuleType]:
    """A script of benchmarks/, imported from its file (benchmarks/ is not a package) while the block runs."""
    name = f"kvconform_{Path(filename).stem}"
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
