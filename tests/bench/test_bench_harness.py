"""The bench's measuring parts on their own: baselines, the timed-step windows, the KV geometry."""

from __future__ import annotations

import pytest
import torch

from kvconform.conformance.bench import timing as bench_harness
from kvconform.conformance.connectors.profiles import ConnectorProfile

# A cache whose memory order is [blocks, tokens, heads, channels] seen through the standard
# [blocks, heads, tokens, channels] view, as vLLM's NHD layouts are.
BLOCKS, HEADS, TOKENS, CHANNELS = 12, 2, 4, 8


def nhd_caches(fill: bool) -> dict[str, torch.Tensor]:
    caches = {}
    for i in range(3):
        physical = torch.zeros(BLOCKS, TOKENS, HEADS, CHANNELS, dtype=torch.float16)
        if fill:
            physical.copy_(torch.randn(physical.shape, generator=torch.Generator().manual_seed(i)))
        caches[f"layer.{i}"] = physical.permute(0, 2, 1, 3)
    return caches


def test_physical_order_keeps_blocks_first_and_follows_memory():
    view = nhd_caches(False)["layer.0"]
    assert not view.is_contiguous()
    ordered = bench_harness.physical_order(view)
    assert ordered.shape == (BLOCKS, TOKENS, HEADS, CHANNELS) and ordered.is_contiguous()


@pytest.mark.parametrize("baseline_cls", list(bench_harness.BASELINES.values()), ids=list(bench_harness.BASELINES))
def test_a_baseline_moves_exactly_the_requested_blocks(baseline_cls, tmp_path):
    source, target = nhd_caches(True), nhd_caches(False)
    source_blocks, target_blocks = torch.tensor([3, 7, 1]), torch.tensor([0, 5, 11])
    baseline = baseline_cls(tmp_path)
    baseline.prepare(source, source_blocks, "req")
    baseline.save(source, source_blocks, "req")
    baseline.load(target, target_blocks, "req")
    baseline.discard("req")
    for layer, view in target.items():
        assert torch.equal(view[target_blocks], source[layer][source_blocks])
        untouched = [b for b in range(BLOCKS) if b not in target_blocks.tolist()]
        assert not view[untouched].any()
    assert not list(tmp_path.rglob("*.bin")), "discard() leaves no files behind"


def test_block_bytes_sums_every_layer():
    assert bench_harness.block_bytes(nhd_caches(False)) == 3 * HEADS * TOKENS * CHANNELS * 2


@pytest.mark.parametrize("extra_config, expected", [
    ({"shared_storage_path": "{storage}"}, "storage"),
    ({"connectors": [{"kv_connector_extra_config": {"shared_storage_path": "{storage}"}}]}, "storage"),
    ({"cpu_bytes_to_use": 1 << 26}, "device-copy"),
    ({}, "device-copy"),
])
def test_the_baseline_follows_whether_the_profile_uses_the_storage_folder(extra_config, expected):
    assert bench_harness.baseline_for(ConnectorProfile(extra_config=extra_config)) == expected


def step(seconds, scheduled=(), sent=(), received=()):
    return bench_harness.StepTiming(seconds, frozenset(scheduled), frozenset(sent), frozenset(received))


def test_a_synchronous_save_is_its_prefill_step():
    steps = [step(9.0, ["old"]), step(0.5, ["r"]), step(0.25)]
    assert bench_harness.save_seconds(steps, "r", since=1) == 0.5


def test_an_asynchronous_save_runs_until_the_connector_reports_it_sent():
    steps = [step(0.5, ["r"]), step(0.25), step(0.125, sent=["r"]), step(8.0)]
    assert bench_harness.save_seconds(steps, "r", since=0) == 0.875


def test_a_synchronous_load_is_the_step_after_the_request_arrived():
    steps = [step(9.0, ["old"]), step(0.5, ["r"]), step(0.25, ["r"])]
    assert bench_harness.load_seconds(steps, "r", since=1) == 0.5


def test_an_asynchronous_load_runs_until_the_connector_reports_it_received():
    steps = [step(0.5), step(0.25, received=["r"]), step(4.0, ["r"])]
    assert bench_harness.load_seconds(steps, "r", since=0) == 0.75


def test_a_request_never_scheduled_cannot_be_timed():
    with pytest.raises(bench_harness.BenchFailure, match="never scheduled"):
        bench_harness.save_seconds([step(1.0, ["other"])], "r", since=0)
    with pytest.raises(bench_harness.BenchFailure, match="never scheduled"):
        bench_harness.load_seconds([step(1.0)], "r", since=0)


@pytest.mark.parametrize("block_size", [16, 32, 64])
def test_the_prompt_makes_example_connector_store_and_claim_exactly_the_size(block_size):
    """ExampleConnector stores (n - 1) // block whole blocks and claims (n - 2) // block of them."""
    n = bench_harness.prompt_length(256, block_size)
    assert (n - 1) // block_size * block_size == 256 and (n - 2) // block_size * block_size == 256


def test_geometry_bytes_per_token_and_model_config():
    llama = bench_harness.GEOMETRIES["llama3-8b"]
    assert llama.bytes_per_token(torch.bfloat16) == 128 * 1024
    config = llama.model_config(8192)
    assert (config["num_hidden_layers"], config["num_key_value_heads"]) == (32, 8)
    assert config["hidden_size"] // config["num_attention_heads"] == 128
    assert config["max_position_embeddings"] == 8192
