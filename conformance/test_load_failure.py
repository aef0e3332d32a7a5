"""Load failures: stored KV deleted or damaged between the consumer's scheduling and its load.

The connector must raise, or report the blocks it could not fill through
``get_block_ids_with_load_errors()``; and every slot vLLM keeps as loaded (the
blocks before a request's first reported one) must hold the producer's bytes,
under both ``kv_load_failure_policy`` values. See
``conformance/checks/load_failure.py`` for vLLM's handling and the sabotages.
A connector that keeps nothing in its storage folder has nothing to take away
and is skipped, saying so. Its answer (raised what, or reported which blocks) is
recorded as the JUnit property ``kvconform.load_failure_answer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.load_failure import POLICIES, SABOTAGES, NothingStored, run_load_failure
from kvconform.conformance.connectors.requirements import refusals_skip
from kvconform.conformance.engine.kvcache import CacheShape

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("load_failure")


@pytest.mark.producer_consumer(required=False, because="it keeps KV in the producer's live memory, not in stored "
                               "files; its transfers fail in test_pair_load_failure (conformance/test_pair_faults.py)")
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("sabotage", list(SABOTAGES))
def test_load_failure(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, sabotage: str, policy: str,
                      make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    with refusals_skip():
        try:
            answer = run_load_failure(make_rig(CacheShape()), SABOTAGES[sabotage], policy)
        except NothingStored as exc:
            pytest.skip(str(exc))
    # run_load_failure raised LoadFailureViolation, naming the slot, if a kept slot held wrong bytes
    record_property("kvconform.load_failure_answer", answer.describe())
