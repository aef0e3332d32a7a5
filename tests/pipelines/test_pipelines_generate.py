"""The generated pipelines: Buildkite's schema, golden files, keys, coverage and the gate API.

Golden files: ``tests/pipelines/golden/<platform>.yml``. After an intended change to the
generator or to pipelines/lanes.yaml, regenerate them with
``KVCONFORM_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/pipelines -k golden`` and review the diff.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pipeline_testkit import conformance_steps, step_commands

from kvconform.conformance.connectors.profiles import load_profiles
from kvconform.pipelines.generate import build_pipeline, render_yaml
from kvconform.pipelines.lanes import LANES_FILE, LanesError
from kvconform.platforms import PLATFORMS
from tests.load import stretched

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
BOOTSTRAP = Path(LANES_FILE).with_name("bootstrap.yml")
CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")
TARGETS = [*PLATFORMS, "all"]
# Buildkite's own key pattern allows `$`, `{` and `}`; ours must not (upload would interpolate them).
KEY = re.compile(r"^[A-Za-z0-9_:-]{1,100}$")
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
FORBIDDEN = {
    "`|| true` (swallows a failure)": re.compile(r"\|\|\s*true\b"),
    "--ignore (skips tests)": re.compile(r"--ignore\b"),
    "--deselect (skips tests)": re.compile(r"--deselect\b"),
    "-k (selects tests by name)": re.compile(r"(^|\s)-k(\s|=|$)"),
}


def generated(target: str) -> dict:
    return build_pipeline([target])


def connectors_of(command: str) -> list[str]:
    return re.findall(r"--connector=(\S+)", command)


def variant(data: dict) -> None:
    """A lanes file using what the shipped one does not: experimental soft-fail, string wrapper, xdist..."""
    data["lanes"]["xpu"]["groups"] = [g for g in data["connector_groups"] if g != "nixl"]
    data["lanes"]["xpu-nixl"] = {"platform": "xpu", "agents": {"queue": "intel_gpu"}, "groups": ["nixl"],
                                 "experimental": True, "soft_fail": [1], "reason": "NIXL's XPU backend is new"}
    data["lanes"]["cuda"].update(attn_backends=["FLASH_ATTN"], xdist_workers=2, depends_on=["image-build"])
    data["lanes"]["rocm"].pop("container")
    data["lanes"]["rocm"]["wrapper"] = {"argv": ["run-in-rocm-container", "--"], "command_as": "string"}
    data["lanes"]["cpu"]["soft_fail"] = True
    data["lanes"]["cpu"]["experimental"] = True
    data["lanes"]["cpu"]["reason"] = "bringing the CPU lane up"


# ---- Buildkite's schema ----------------------------------------------------------------------------


def test_every_output_passes_buildkites_schema(tmp_path, write_lanes):
    """All platforms, a variant lanes file and the bootstrap example, in one check-jsonschema run.

    A deliberately broken pipeline rides along, so the run is shown to reject what it should.
    """
    files = {}
    for target in TARGETS:
        files[f"{target}.yml"] = render_yaml(generated(target))
    variant_lanes = write_lanes(variant, "variant-lanes.yaml")
    files["variant-all.yml"] = render_yaml(build_pipeline(["all"], config_path=variant_lanes))
    files["gate-subset.yml"] = render_yaml(build_pipeline(["xpu", "cpu"], ["ExampleConnector", "NixlConnector"]))
    broken = generated("xpu")
    broken["steps"][0]["steps"][0]["retry"] = {"automatic": [{"exit_status": "-1", "limit": 2}]}
    files["broken.yml"] = render_yaml(broken)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / name) for name in files] + [str(BOOTSTRAP)]

    result = subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.buildkite", "-o", "JSON", *paths],
                            capture_output=True, text=True, timeout=stretched(120))
    report = json.loads(result.stdout)
    assert report["parse_errors"] == []
    failed = {Path(error["filename"]).name for error in report["errors"]}
    assert failed == {"broken.yml"}, json.dumps(report["errors"], indent=1)[:4000]


# ---- golden files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_golden(target):
    text = render_yaml(generated(target))
    golden = GOLDEN / f"{target}.yml"
    if os.environ.get("KVCONFORM_REGEN_GOLDEN"):
        golden.write_text(text)
        pytest.skip(f"rewrote {golden}")
    assert golden.exists(), f"no golden file {golden}; create it with KVCONFORM_REGEN_GOLDEN=1"
    assert text == golden.read_text(), f"{target} pipeline differs from {golden} (regenerate if intended)"


@pytest.mark.parametrize("target", TARGETS)
def test_yaml_loads_back_to_the_same_pipeline(target):
    pipeline = generated(target)
    assert yaml.safe_load(render_yaml(pipeline)) == pipeline


# ---- keys, shell hygiene ---------------------------------------------------------------------------


def _keys(steps: list[dict]) -> list[str]:
    return [k for s in steps for k in ([s["key"]] if "key" in s else []) + _keys(s.get("steps", []))]


@pytest.mark.parametrize("target", TARGETS)
def test_step_keys_are_valid_and_unique(target, write_lanes):
    for pipeline in (generated(target), build_pipeline([target], config_path=write_lanes(variant))):
        keys = _keys(pipeline["steps"])
        assert len(keys) == len(set(keys)), keys
        for key in keys:
            assert KEY.match(key) and not UUID.match(key), key
        assert len([s for s in pipeline["steps"] if "key" in s]) == len(pipeline["steps"]) - 1  # all but wait


def test_no_step_swallows_failures_or_skips_tests(write_lanes):
    texts = {target: render_yaml(generated(target)) for target in TARGETS}
    texts["variant"] = render_yaml(build_pipeline(["all"], config_path=write_lanes(variant)))
    texts["lanes.yaml"] = LANES_FILE.read_text()
    texts["bootstrap.yml"] = BOOTSTRAP.read_text()
    for name, text in texts.items():
        for what, pattern in FORBIDDEN.items():
            assert not pattern.search(text), f"{name} contains {what}"
    assert FORBIDDEN["`|| true` (swallows a failure)"].search("make test || true")  # the patterns do match
    assert FORBIDDEN["--ignore (skips tests)"].search("pytest --ignore=conformance/test_x.py")


@pytest.mark.parametrize("target", TARGETS)
def test_every_dollar_in_a_command_is_escaped_for_upload(target):
    commands = [command for _, command in step_commands(generated(target))]
    assert any("$$" in c for c in commands)  # the report step reads $? at run time
    for command in commands:
        assert "$" not in re.sub(r"\$\$", "", command), command


# ---- what runs where ---------------------------------------------------------------------------------


@pytest.mark.parametrize("platform_name", list(PLATFORMS))
def test_each_platform_runs_every_connector_once_with_its_platform_flag(platform_name):
    """The coverage-gap bug class: no connector left out of a lane, none run twice, nothing ignored."""
    platform = platform_name
    pipeline = generated(platform)
    ran = []
    for step in conformance_steps(pipeline):
        pytest_lines = [c for c in step["commands"] if "-m pytest --pyargs kvconform.conformance" in c]
        assert pytest_lines, step["key"]
        for line in pytest_lines:
            assert f"--platform={platform}" in line and "--platform=" not in line.replace(f"--platform={platform}", "")
            ran += connectors_of(line)
    assert sorted(ran) == sorted(load_profiles().connectors)


def test_xpu_pipeline_runs_the_example_connector_on_xpu():
    """The bug that started it: the example-connector test was --ignore'd in the XPU job."""
    steps = conformance_steps(generated("xpu"))
    lines = [c for s in steps for c in s["commands"] if "--connector=ExampleConnector" in c]
    assert len(lines) == 1
    assert "python3 -P -m pytest --pyargs kvconform.conformance --platform=xpu" in lines[0]
    assert "--junitxml=reports/out/junit/xpu/" in lines[0]
    assert all(step["agents"] == {"queue": "${KVCONFORM_XPU_QUEUE:-intel_gpu}"} for step in steps)
    assert all(step["env"]["ZE_AFFINITY_MASK"] == "0,1" for step in steps)
    assert all("soft_fail" not in step for step in steps)


@pytest.mark.parametrize("target", TARGETS)
def test_junit_files_are_uploaded_and_reported(target):
    pipeline = generated(target)
    junits = []
    for step in conformance_steps(pipeline):
        written = [m for c in step["commands"] for m in re.findall(r"--junitxml=([^\s']+)", c)]
        assert sorted(written) == sorted(step["artifact_paths"])
        junits += written
    wait, report = pipeline["steps"][-2:]
    assert wait == {"wait": None, "continue_on_failure": True}
    platforms = list(PLATFORMS) if target == "all" else [target]
    assert {Path(j).parent.name for j in junits} == set(platforms)
    joined = "\n".join(report["commands"])
    for platform in platforms:
        assert f"buildkite-agent artifact download 'reports/out/junit/{platform}/*.xml' ." in joined
    assert "python3 -P -m kvconform report " in joined and " --out reports/out" in joined
    assert "buildkite-agent annotate --style" in joined and "< reports/out/summary.md" in joined
    keys = [step["key"] for step in conformance_steps(pipeline)]
    assert f"for key in {' '.join(keys)}; do" in report["commands"]  # the annotation's style reads every outcome


def test_retry_and_soft_fail_follow_the_lanes(write_lanes):
    pipeline = build_pipeline(["all"], config_path=write_lanes(variant))
    steps = {s["key"]: s for s in conformance_steps(pipeline)}
    rocm = steps["kvconform-test-rocm-reference"]["retry"]["automatic"]
    assert {"exit_status": 134, "limit": 1} in rocm
    for key, step in steps.items():
        statuses = {r.get("exit_status") for r in step["retry"]["automatic"]} - {None}
        assert statuses <= ({-1, 134} if key.startswith("kvconform-test-rocm") else {-1}), key
    assert steps["kvconform-test-xpu-nixl-nixl"]["soft_fail"] == [{"exit_status": 1}]
    assert steps["kvconform-test-xpu-nixl-nixl"]["label"].endswith("[experimental]")
    assert steps["kvconform-test-cpu"]["soft_fail"] is True
    hard_steps = ("kvconform-test-xpu-r", "kvconform-test-cuda")
    assert all("soft_fail" not in s for k, s in steps.items() if k.startswith(hard_steps))
    cuda = steps["kvconform-test-cuda-reference"]
    assert cuda["depends_on"] == ["${KVCONFORM_CUDA_IMAGE_BUILD_STEP:-image-build}", "image-build"]  # lane's kept
    assert " -n 2 " in cuda["commands"][-1] and "--attn-backend=FLASH_ATTN" in cuda["commands"][-1]


# ---- the gate's API ---------------------------------------------------------------------------------


def test_gate_selection_restricts_steps_to_exactly_those_connectors():
    wanted = ["NixlConnector", "ExampleConnector"]
    pipeline = build_pipeline(["xpu", "cpu"], wanted)
    groups = [s for s in pipeline["steps"] if "group" in s]
    assert [g["key"] for g in groups] == ["kvconform-xpu", "kvconform-cpu"]
    for group in groups:
        ran = [c for s in group["steps"] for line in s["commands"] for c in connectors_of(line)]
        assert sorted(ran) == sorted(wanted), group["key"]
    xpu_keys = [s["key"] for s in groups[0]["steps"]]
    assert xpu_keys == ["kvconform-test-xpu-reference", "kvconform-test-xpu-nixl"]
    cpu = groups[1]["steps"][0]
    assert cpu["parallelism"] == 2  # the lane asks for 3 jobs; two connectors fill two
    one = build_pipeline(["cpu"], ["ExampleConnector"])
    assert "parallelism" not in conformance_steps(one)[0]


def test_all_connectors_is_the_same_as_no_selection():
    everything = list(load_profiles().connectors)
    assert build_pipeline(["all"], everything) == build_pipeline(["all"])


@pytest.mark.parametrize("names, selection, message", [
    (["xpu"], ["NoSuchConnector"], "NoSuchConnector is in no connector group and names no connector"),
    (["xpu"], ["$(touch pwned)"], "in no connector group"),
    (["xpu"], [], "no connectors selected"),
    (["tpu"], None, "unknown platform(s) 'tpu'"),
    ([], None, "no platform given"),
])
def test_gate_api_rejects_bad_requests(names, selection, message):
    with pytest.raises(LanesError, match=re.escape(message)):
        build_pipeline(names, selection)


def test_a_platform_without_a_lane_is_an_error(write_lanes):
    path = write_lanes(lambda data: data["lanes"].pop("rocm"))
    assert build_pipeline(["xpu"], config_path=path)
    with pytest.raises(LanesError, match=re.escape(f"{path}: no lane runs on rocm")):
        build_pipeline(["all"], config_path=path)


def test_colliding_step_keys_are_an_error(write_lanes):
    def collide(data):
        data["connector_groups"] = {"a-b": ["ExampleConnector"], "b": ["MultiConnector"]}
        data["lanes"]["xpu-a"] = {"platform": "xpu", "agents": {"queue": "q"}, "groups": ["b"]}
        data["lanes"]["xpu"]["groups"] = ["a-b"]

    with pytest.raises(LanesError, match="two steps would have the key 'kvconform-test-xpu-a-b'"):
        build_pipeline(["xpu"], config_path=write_lanes(collide))


def test_generation_imports_neither_vllm_nor_torch():
    code = ("import sys; from pipelines.generate import build_pipeline, render_yaml; "
            "render_yaml(build_pipeline(['all'])); "
            "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=stretched(60))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---- connectors in no group, and the lanes file's variables -------------------------------------------


def test_a_connector_in_no_group_runs_in_the_default_group_of_its_platforms_first_lane():
    steps = conformance_steps(build_pipeline(["xpu"], ["my_connector:DictConnector", "ExampleConnector"]))
    assert [step["key"] for step in steps] == ["kvconform-test-xpu-reference", "kvconform-test-xpu-ungrouped"]
    assert connectors_of(steps[1]["commands"][-1]) == ["my_connector:DictConnector"]
    [cpu] = conformance_steps(build_pipeline(["cpu"], ["my_connector:DictConnector"]))  # a sharded lane: its one step
    assert connectors_of(cpu["commands"][-1]) == ["my_connector:DictConnector"]


def test_a_connector_whose_group_no_lane_runs_names_the_key_to_add(write_lanes):
    path = write_lanes(lambda data: data["lanes"]["xpu"].update(groups=["reference"]))
    with pytest.raises(LanesError, match=re.escape(
            f"{path}: NixlConnector is in connector group(s) nixl, which no xpu lane runs; "
            "add the group to `lanes.xpu.groups`")):
        build_pipeline(["xpu"], ["NixlConnector"], config_path=path)


def test_queues_images_and_plugin_versions_are_variables_set_once(shipped_lanes):
    """Every queue, image, image build step and plugin name in the output is a `${KVCONFORM_...:-default}`
    from `variables:`."""
    values = set(shipped_lanes["variables"].values())
    assert all(re.fullmatch(r"\$\{KVCONFORM_[A-Z0-9_]+:-[^}$]+(\$\{BUILDKITE_COMMIT\}[^}$]*)?\}", v) for v in values)
    pipeline = generated("all")
    steps = [*conformance_steps(pipeline), pipeline["steps"][-1]]
    used = {step["agents"]["queue"] for step in steps}
    used |= {name for step in steps for plugin in step.get("plugins", []) for name in plugin}
    used |= {settings["image"] for step in steps for plugin in step.get("plugins", []) for settings in plugin.values()}
    used |= {step["env"]["KVCONFORM_IMAGE"] for step in steps if "KVCONFORM_IMAGE" in step.get("env", {})}
    used |= {key for step in steps for key in step.get("depends_on", []) if isinstance(key, str)}
    assert used == values  # each one used, none written out elsewhere
