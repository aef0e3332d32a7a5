"""The pair checks' bounds as --kvconform-wait-scale scales them: longer as asked, shorter but never below vLLM's own
handshake bound, and a bound already that short left alone."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvconform.conformance.checks.pair_core import DRAIN_TIMEOUT_S, NOTIFY_TIMEOUT_S, SHORTEST_BOUND_S, scaled_bound


@pytest.mark.parametrize(("scale", "seconds", "bound"), [
    (1.0, DRAIN_TIMEOUT_S, 30.0),
    (2.0, NOTIFY_TIMEOUT_S, 30.0),
    (0.5, DRAIN_TIMEOUT_S, 15.0),
    (0.5, NOTIFY_TIMEOUT_S, 7.5),
    (0.1, NOTIFY_TIMEOUT_S, SHORTEST_BOUND_S),  # never below vLLM's handshake bound
    (0.5, 5.0, 5.0),  # a bound of 5 s stays 5 s
    (0.5, 3.0, 3.0),  # and a shorter one is not shortened
    (2.0, 3.0, 6.0),
])
def test_a_bound_as_the_run_scales_it(scale, seconds, bound):
    assert scaled_bound(SimpleNamespace(wait_scale=scale), seconds) == bound
