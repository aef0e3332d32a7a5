"""The P/D pair round-trip from a producer of more tensor-parallel ranks than its consumer.

Each producer rank (its own process) holds its share of the KV heads (a replica of one head where the model has fewer
heads than the producer has ranks, beside Mamba layers); the consumer reads each head once into its slice of each block
and notifies every rank. What must hold: ``conformance/checks/pair_ranks.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from kvconform.conformance.checks.pair_core import ConsumerDoesNotRead
from kvconform.conformance.checks.pair_ranks import (
    PRODUCER_TP,
    RANKED_MODELS,
    ranked_model_rig,
    run_pair_ranks,
)
from kvconform.conformance.connectors.requirements import refusals_skip

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvconform.conformance.connectors.selection import ConnectorParam
    from kvconform.conformance.engine.rig import MakeRig
    from kvconform.platforms.spec import PlatformSpec

pytestmark = pytest.mark.check("roundtrip")


@pytest.mark.producer_consumer(required=True, because="no engine reads another's tensor-parallel ranks")
@pytest.mark.parametrize("model", list(RANKED_MODELS))
def test_pair_ranks(platform: PlatformSpec, attn_backend: str, subject: ConnectorParam, model: str,
                    make_rig: MakeRig, record_property: Callable[[str, object], None]) -> None:
    ranked = RANKED_MODELS[model]
    if ranked.kinds:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma

        if not supports_hma(subject.load_class()):
            pytest.skip(f"{subject.name}: does not implement SupportsHMA, so vLLM turns the hybrid KV cache manager "
                        f"off and runs no hybrid model with it")
    rig = ranked_model_rig(make_rig(ranked.shape, ranked.rig_class), ranked)
    try:
        with refusals_skip():
            result = run_pair_ranks(rig, ranked)
    except ConsumerDoesNotRead as exc:
        pytest.skip(str(exc))
    record_property("kvconform.claim", f"{ranked.doc}: tokens claimed and compared per request from a TP "
                                       f"{PRODUCER_TP} producer: {result.claims}")
