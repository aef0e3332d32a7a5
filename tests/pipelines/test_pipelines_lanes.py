"""The lanes file: every mistake a CI owner can make is one error naming file, line and key."""

from __future__ import annotations

import re

import pytest

from kvconform.pipelines.lanes import LANES_FILE, LanesConfig, LanesError, load_lanes
from kvconform.pipelines.policy import RETRYABLE_EXIT_STATUSES, RETRYABLE_SIGNAL_REASONS
from kvconform.platforms import PLATFORMS


def _set(path: str, value):
    """An edit that sets data[a][b]... = value (path dotted; list indexes as digits)."""
    def edit(data):
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return edit


def _rename(path: str, new: str):
    def edit(data):
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        node[new] = node.pop(last)
    return edit


def _both(*edits):
    def edit(data):
        for one in edits:
            one(data)
    return edit


# (edit, the key the error names, the line's text that key is on, words of the message)
MISTAKES = {
    "typo in a lane": (_rename("lanes.xpu.agents", "agnets"), "lanes.xpu.agnets", "agnets:",
                       "Extra inputs are not permitted"),
    "typo at the top": (_rename("defaults", "defualts"), "defualts", "defualts:", "Extra inputs are not permitted"),
    "typo in a retry rule": (_set("lanes.rocm.retry.2", {"exit_stauts": 134, "limit": 1}),
                             "lanes.rocm.retry.2.exit_stauts", "exit_stauts:", "Extra inputs are not permitted"),
    "typo in the container": (_rename("lanes.xpu.container.options", "opts"), "lanes.xpu.container.opts", "opts:",
                              "Extra inputs are not permitted"),
    "agents missing": (lambda d: d["lanes"]["xpu"].pop("agents"), "lanes.xpu.agents", None, "Field required"),
    "unknown platform": (_set("lanes.xpu.platform", "tpu"), "lanes.xpu.platform", "platform: tpu",
                         "Input should be 'cuda'"),
    "bad lane name": (_rename("lanes.xpu", "XPU lane"), "lanes.XPU lane.[key]", None, "String should match pattern"),
    "env value not a string": (_set("lanes.xpu.env.ZE_AFFINITY_MASK", 0), "lanes.xpu.env.ZE_AFFINITY_MASK",
                               "ZE_AFFINITY_MASK:", "Input should be a valid string"),
    "plugin entry with two plugins": (_set("lanes.cuda.plugins", [{"a#v1": {}, "b#v1": {}}]), "lanes.cuda.plugins",
                                      "plugins:", "one mapping of plugin name"),
    "soft-fail on a full lane": (_set("lanes.xpu.soft_fail", True), "lanes.xpu.soft_fail", "soft_fail:",
                                 "soft_fail is allowed only on lanes marked experimental: true"),
    "soft-fail exit list on a full lane": (_set("lanes.xpu.soft_fail", [1]), "lanes.xpu.soft_fail", "soft_fail:",
                                           "only on lanes marked experimental"),
    "experimental without a reason": (_both(_set("lanes.xpu.experimental", True), _set("lanes.xpu.soft_fail", True)),
                                      "lanes.xpu.experimental", "experimental:", "an experimental lane needs a reason"),
    "retrying a test failure": (_set("lanes.xpu.retry", [{"exit_status": 1, "limit": 2}]), "lanes.xpu.retry.0",
                                "exit_status: 1", "exit_status 1 is not an infrastructure exit"),
    "retrying every exit": (_set("lanes.xpu.retry", [{"exit_status": "*", "limit": 2}]),
                            "lanes.xpu.retry.0.exit_status", "exit_status:", "Input should be a valid integer"),
    "retrying on a cancel": (_set("lanes.xpu.retry", [{"signal_reason": "cancel", "limit": 1}]), "lanes.xpu.retry.0",
                             "signal_reason: cancel", "signal_reason cancel is not an infrastructure exit"),
    "GPU-hang retry on xpu": (_set("lanes.xpu.retry", [{"exit_status": 134, "limit": 1}]), "lanes.xpu.retry.0",
                              "exit_status: 134", "exit_status 134 may retry only on rocm lanes"),
    "GPU-hang retry in defaults": (_set("defaults.retry.1", {"exit_status": 134, "limit": 1}), "defaults.retry.1",
                                   "exit_status: 134", "not in defaults"),
    "retry limit over Buildkite's": (_set("defaults.retry.0.limit", 11), "defaults.retry.0.limit", "limit: 11",
                                     "less than or equal to 10"),
    "retry rule without a condition": (_set("defaults.retry.0", {"limit": 1}), "defaults.retry.0", None,
                                       "needs exit_status or signal_reason"),
    "unknown group": (_set("lanes.xpu.groups", ["reference", "stroage"]), "lanes.xpu.groups.1", "- stroage",
                      "unknown connector group 'stroage'"),
    "unknown connector": (_set("connector_groups.nixl.1", "NixlPulConnector"), "connector_groups.nixl.1",
                          "- NixlPulConnector", "unknown connector 'NixlPulConnector'"),
    "hostile connector name": (_set("connector_groups.nixl.0", "$(touch pwned)"), "connector_groups.nixl.0",
                               "touch pwned", "unknown connector '$(touch pwned)'"),
    "connector run twice": (_set("connector_groups.transfer", ["MooncakeConnector", "NixlConnector"]),
                            "lanes.cuda.groups.3", None,
                            "NixlConnector would run twice on cuda: in cuda/nixl and in cuda/transfer"),
    "backend of another platform": (_set("lanes.xpu.attn_backends", ["FLASHINFER"]), "lanes.xpu.attn_backends.0",
                                    "- FLASHINFER", "FLASHINFER cannot serve KV connectors on xpu"),
    "visibility variable of another platform": (_set("lanes.xpu.env.HIP_VISIBLE_DEVICES", "0,1"),
                                                "lanes.xpu.env.HIP_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES:",
                                                "selects devices on rocm, not on xpu (use ZE_AFFINITY_MASK)"),
    "visibility contradicts devices": (_set("lanes.xpu.env.ZE_AFFINITY_MASK", "0"), "lanes.xpu.env.ZE_AFFINITY_MASK",
                                       "ZE_AFFINITY_MASK:", "makes 1 device(s) visible but the lane says devices: 2"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_one_error_naming_file_line_and_key(mistake, write_lanes):
    edit, key, line_text, words = MISTAKES[mistake]
    path = write_lanes(edit)
    with pytest.raises(LanesError) as caught:
        load_lanes(path)
    message = str(caught.value)
    assert "\n" not in message
    where = re.match(rf"^{re.escape(str(path))}(?::(\d+))?: (.+?): (.*)$", message)
    assert where, message
    assert where.group(2) == key, message
    assert words in where.group(3), message
    if line_text is not None:
        line = int(where.group(1))
        assert line_text in path.read_text().splitlines()[line - 1], (message, line)


def test_unknown_key_error_names_the_shipped_file_path(tmp_path):
    broken = tmp_path / "lanes.yaml"
    broken.write_text(LANES_FILE.read_text().replace("    parallelism: 3", "    paralelism: 3"))
    with pytest.raises(LanesError, match=r"lanes\.yaml:\d+: lanes\.cpu\.paralelism: Extra inputs are not permitted"):
        load_lanes(broken)


def test_not_yaml_and_unreadable(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("lanes:\n  xpu: [unclosed\n")
    with pytest.raises(LanesError, match=rf"^{re.escape(str(bad))}:\d+: not valid YAML"):
        load_lanes(bad)
    with pytest.raises(LanesError, match=r"cannot read: No such file or directory"):
        load_lanes(tmp_path / "missing.yaml")


def test_shipped_lanes_load_and_cover_every_platform():
    config = load_lanes()
    assert isinstance(config, LanesConfig)
    assert {lane.platform for lane in config.lanes.values()} == set(PLATFORMS)


def test_experimental_lane_with_a_reason_may_soft_fail(write_lanes):
    def experimental(data):
        data["lanes"]["xpu"].update(experimental=True, soft_fail=True, reason="bringing XPU up")

    assert load_lanes(write_lanes(experimental)).lanes["xpu"].soft_fail is True


def test_third_party_connectors_may_be_grouped(write_lanes):
    config = load_lanes(write_lanes(_set("connector_groups.transfer", ["MooncakeConnector", "MoRIIOConnector",
                                                                        "mypkg.kv.connector:MyConnector"])))
    assert "mypkg.kv.connector:MyConnector" in config.connector_groups["transfer"]


def test_policy_tables_hold_only_infrastructure_exits():
    """The allowed set, stated once: agent lost, agent stopped, ROCm GPU hang (rocm only)."""
    assert set(RETRYABLE_EXIT_STATUSES) == {-1, 134}
    assert RETRYABLE_EXIT_STATUSES[-1].platforms is None
    assert RETRYABLE_EXIT_STATUSES[134].platforms == {"rocm"}
    assert set(RETRYABLE_SIGNAL_REASONS) == {"agent_stop"}
