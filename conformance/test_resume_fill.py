"""Synthetic KV fills across a preemption: a resumed request is filled only where its new claim says.

vLLM's Scheduler preempts a request after it decoded three tokens (a pool that holds exactly two prompts) and
resumes it when the other finishes; ``conformance/checks/fill_resume.py`` says what must hold at every step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.fill_resume import ResumeRig, run_fill_resumed
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("fill")


def test_resumed_request_fill(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam,
                              make_rig: MakeRig) -> None:
    """A request preempted after it decoded, then resumed: no fill over the slots of its generated tokens or of
    another request, and the request that was not preempted filled once."""
    with refusals_skip():
        result = run_fill_resumed(make_rig(CacheShape(), ResumeRig))
    assert result.resumed is not None and result.generated_before_preemption > 0
    assert result.checked_slots > 0
