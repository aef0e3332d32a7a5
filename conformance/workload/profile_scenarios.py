"""What a connector profile's ``scenarios`` may name: the settings of a variant that serves one situation run it alone.

The workload check runs two kinds of named situations: its hand-written scenarios (``scenarios.py``) and the
sliding-window hit's situations (``checks/sliding_window_hit.py``). A variant's settings may serve one of either (a
tier small enough to evict, chunks of two blocks), so one list of names serves both tests and the profile's check.
"""

from __future__ import annotations


def profile_scenarios() -> list[str]:
    """Every name a profile's ``scenarios`` may hold: workload scenarios, then sliding-window hit situations."""
    from ..checks.sliding_window_hit import HIT_SITUATIONS
    from .scenarios import WORKLOAD_SCENARIOS

    return [*WORKLOAD_SCENARIOS, *HIT_SITUATIONS]
