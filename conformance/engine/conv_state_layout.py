"""The Mamba conv-state layout a check's engines run with, as a served engine's own process would have it.

vLLM stores a Mamba layer's conv state as (state_len, dim) ("SD") or (dim, state_len) ("DS"). It reads the layout
from ``VLLM_SSM_CONV_STATE_LAYOUT`` once per process and caches it (``get_conv_state_layout``); vLLM's CPU platform
sets the variable, when unset, while it checks a config: DS for a config that names a NIXL connector, SD otherwise.
NIXL's worker moves Mamba state in the DS layout only (it asserts so when built; on other platforms the user sets
it). A served engine is a process of its own, so its layout is its connector's; the suite's process builds many
configs, and the first one fixed the layout for all. ``conv_state_layout`` gives a check's engines the layout its
P/D deployment runs with, and the process's own layout back afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from ..vllm_install import api as vllm_api

LAYOUT_VAR = "VLLM_SSM_CONV_STATE_LAYOUT"
PAIR_LAYOUT = "DS"  # what NIXL's worker requires of Mamba state, and what vLLM's CPU platform picks for it


@contextmanager
def conv_state_layout(layout: str) -> Iterator[None]:
    """Inside the context vLLM reads ``layout`` as the conv-state layout; after it, what it read before."""
    cached = vllm_api.find("get_conv_state_layout")
    saved = os.environ.get(LAYOUT_VAR)
    os.environ[LAYOUT_VAR] = layout
    cached.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(LAYOUT_VAR, None)
        else:
            os.environ[LAYOUT_VAR] = saved
        cached.cache_clear()
