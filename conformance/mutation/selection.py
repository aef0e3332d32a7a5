"""Which mutants a run keeps: those on the lines a diff adds or changes, then a seeded sample of the reached ones.

A diff names files by its own paths (``vllm/distributed/...`` in a vLLM checkout, ``src/mypkg/...`` in a
connector's repository); a module matches a diff's file where one path ends with the other, whole folder names
compared.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from .generate import Candidate

Item = TypeVar("Item")


def same_file(module: str, diff_path: str) -> bool:
    """Whether the module shown as ``module`` is the file a diff names ``diff_path``."""
    short, long = sorted((module.strip("/").split("/"), diff_path.strip("/").split("/")), key=len)
    return long[len(long) - len(short):] == short


def on_changed_lines(candidates: list[Candidate], changed: dict[str, set[int]]) -> list[Candidate]:
    """The candidates on a line the diff adds or changes, in a file it touches."""
    def touched(candidate: Candidate) -> bool:
        return any(candidate.line in lines for path, lines in changed.items() if same_file(candidate.module, path))

    return [c for c in candidates if touched(c)]


def sample(items: Sequence[Item], size: int | None, seed: int) -> list[Item]:
    """``size`` of ``items`` drawn with ``seed`` (all where ``size`` is None or not smaller), in their order: the
    same items for the same seed and the same items in the same order (callers sort them by id)."""
    if size is None or size >= len(items):
        return list(items)
    chosen = set(random.Random(seed).sample(range(len(items)), size))
    return [item for index, item in enumerate(items) if index in chosen]
