"""Prompt token ids for the checks and the bench: one home, so every check's prompts are made the same way.

Prompts are random but reproducible from a seed, so a failure reruns with the same tokens, and prompts
of different seeds differ, so no request hits another's stored KV or the prefix cache by accident.
"""

from __future__ import annotations

import random

# token ids drawn from [1, TOKEN_ID_LIMIT): inside the tiny model's vocabulary, never the padding id 0
TOKEN_ID_LIMIT = 999


def seeded_prompt(seed: int | str, length: int) -> list[int]:
    """``length`` token ids, the same for the same seed."""
    rng = random.Random(seed)
    return [rng.randrange(1, TOKEN_ID_LIMIT) for _ in range(length)]


def request_prompt(request_index: int, length: int) -> list[int]:
    """The prompt of a check's ``request_index``-th request (its own seed range, apart from small seeds)."""
    return seeded_prompt(1000 + request_index, length)
