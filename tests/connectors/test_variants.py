"""Profile variants: the keys a variant gives replace the profile's, on the platforms it names (default: all)."""

from __future__ import annotations

from kvconform.conformance.connectors.selection import resolve_connectors, with_variants


def test_multi_connectors_late_saves_variant_runs_everywhere_with_its_own_children_and_checks():
    for platform in ("cpu", "cuda"):
        plain, late, nixl_child, reporting = with_variants(resolve_connectors(["MultiConnector"]), platform)
        assert (plain.id, late.id, nixl_child.id, reporting.id) == (
            "MultiConnector", "MultiConnector@late-saves", "MultiConnector@nixl-child", "MultiConnector@reporting")
        assert nixl_child.profile.checks == reporting.profile.checks == ["lifecycle"]
        assert "lifecycle" in plain.profile.checks
        assert late.profile.checks == ["workload"] and "roundtrip" in plain.profile.checks
        children = [c["kv_connector"] for c in late.profile.extra_config["connectors"]]
        assert children == ["LateSaveExampleConnector"] * 3
        assert late.profile.promised_hit == plain.profile.promised_hit == "whole-blocks"  # kept: the variant omits it
        assert late.profile.variants == {}


def test_a_variant_naming_platforms_is_absent_elsewhere():
    assert [p.id for p in with_variants(resolve_connectors(["NixlConnector"]), "cuda")] == [
        "NixlConnector", "NixlConnector@device-buffer"]
    assert [p.id for p in with_variants(resolve_connectors(["NixlConnector"]), "cpu")] == ["NixlConnector"]
