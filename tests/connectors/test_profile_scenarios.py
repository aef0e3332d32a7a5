"""A profile's ``scenarios`` names workload scenarios or sliding-window hit situations that exist; OffloadingConnector's
small-tier variant runs the kv-events scenario alone, on a tier smaller than the cpu-medium variant's, and its
two-block-chunks variant the mid-chunk-hit situation alone, on chunks of two blocks, their other settings the same."""

from __future__ import annotations

from kvconform.conformance.connectors.profiles import load_profiles
from kvconform.conformance.workload.profile_scenarios import profile_scenarios


def test_every_scenario_a_profile_names_exists():
    named = {(name, variant): settings.scenarios
             for name, profile in load_profiles().connectors.items()
             for variant, settings in [("", profile), *profile.variants.items()] if settings.scenarios is not None}
    assert named, "no profile names scenarios: the small-tier variant lost its key"
    for where, scenarios in named.items():
        assert set(scenarios) <= set(profile_scenarios()), (where, scenarios)


def test_the_small_tier_variant_is_the_cpu_medium_one_on_a_smaller_tier():
    variants = load_profiles().connectors["OffloadingConnector"].variants
    small, medium = variants["small-tier"], variants["cpu-medium"]
    assert small.scenarios == ["kv-events"] and small.checks == ["workload"]
    assert small.extra_config is not None and medium.extra_config is not None
    assert small.extra_config["cpu_bytes_to_use"] < medium.extra_config["cpu_bytes_to_use"]
    assert {k: v for k, v in small.extra_config.items() if k != "cpu_bytes_to_use"} == {
        k: v for k, v in medium.extra_config.items() if k != "cpu_bytes_to_use"}


def test_the_two_block_chunks_variant_is_the_cpu_medium_one_on_chunks_of_two_blocks():
    variants = load_profiles().connectors["OffloadingConnector"].variants
    chunks, medium = variants["two-block-chunks"], variants["cpu-medium"]
    assert chunks.scenarios == ["mid-chunk-hit"] and chunks.checks == ["workload"]
    assert chunks.extra_config is not None and medium.extra_config is not None
    assert chunks.extra_config == {**medium.extra_config, "blocks_per_chunk": 2}
