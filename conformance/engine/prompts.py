"""Prompt token ids for the checks, the workloads and the bench: one home, so every prompt is made the same way.

Prompts are random but reproducible from a seed, so a failure reruns with the same tokens, and prompts
of different seeds differ, so no request hits another's stored KV or the prefix cache by accident.

Every prompt also belongs to an owner: the test that draws it (the suite's conftest sets it around each
test), or one generated workload of a test. Prompts of different owners are drawn apart (random ids: a
shared block of tokens is vanishingly unlikely), so KV that one test stored is never a hit for another,
even in a connector that keeps one store for the whole process (an in-memory store, a server shared by
every test): a test's outcome does not depend on which tests ran before it in that process.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

# token ids drawn from [1, TOKEN_ID_LIMIT): inside the tiny model's vocabulary, never the padding id 0
TOKEN_ID_LIMIT = 999

_owner = ""  # whose prompts are drawn now; "" outside any test (the bench)


@contextmanager
def prompts_of(owner: str) -> Iterator[None]:
    """Within the block, every prompt is drawn for ``owner`` (a test id, or a test id and a workload's number)."""
    global _owner
    before, _owner = _owner, owner
    try:
        yield
    finally:
        _owner = before


def prompt_rng(seed: int | str) -> random.Random:
    """The random source of the prompt seeded ``seed`` for the current owner: the same for the same pair."""
    return random.Random(f"{_owner}\0{seed}" if _owner else seed)


def seeded_prompt(seed: int | str, length: int) -> list[int]:
    """``length`` token ids, the same for the same seed and owner."""
    rng = prompt_rng(seed)
    return [rng.randrange(1, TOKEN_ID_LIMIT) for _ in range(length)]


def request_prompt(request_index: int, length: int) -> list[int]:
    """The prompt of a check's ``request_index``-th request (its own seed range, apart from small seeds)."""
    return seeded_prompt(1000 + request_index, length)
