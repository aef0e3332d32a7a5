"""Steps wait for the step that makes their image, exactly when the build makes it; defaults are named on stderr."""

from __future__ import annotations

import argparse

import pytest
import yaml
from pipeline_testkit import conformance_steps

from kvconform.conformance.cli import main
from kvconform.pipelines.gate.emitted_pipeline import emit_pipeline
from kvconform.pipelines.gate.selection import Selection
from kvconform.pipelines.generate import build_pipeline
from kvconform.pipelines.lanes import LanesError, load_lanes
from kvconform.pipelines.placeholders import _references, placeholders
from kvconform.platforms import PLATFORMS

# vLLM CI's keys of the steps that make each platform's image of the commit (vllm-project/vllm .buildkite files).
VLLM_CI_KEYS = {"cuda": "image-build", "rocm": "image-build-amd", "xpu": "image-build-xpu", "cpu": "image-build-cpu"}
FIXED_IMAGE = "intel/vllm:0.32.0-xpu"


def default_key(platform: str) -> str:
    return f"${{KVCONFORM_{platform.upper()}_IMAGE_BUILD_STEP:-{VLLM_CI_KEYS[platform]}}}"


def images(step: dict) -> list[str]:
    found = [step["env"]["KVCONFORM_IMAGE"]] if "KVCONFORM_IMAGE" in step.get("env", {}) else []
    return found + [settings["image"] for plugin in step.get("plugins", []) for settings in plugin.values()]


def report_of(pipeline: dict) -> dict:
    return pipeline["steps"][-1]


def fixed_xpu_image(data: dict) -> None:
    data["lanes"]["xpu"]["container"]["image"] = FIXED_IMAGE


@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_each_test_step_waits_for_vllm_cis_build_of_its_image_by_default(platform):
    steps = conformance_steps(build_pipeline([platform]))
    assert steps
    for step in steps:
        assert any("${BUILDKITE_COMMIT}" in image for image in images(step)), step["key"]
        assert step["depends_on"] == [default_key(platform)], step["key"]


def test_the_report_waits_for_its_image_and_for_every_test_step_failed_or_not():
    pipeline = build_pipeline(["all"])
    report = report_of(pipeline)
    test_keys = [step["key"] for step in conformance_steps(pipeline)]
    assert report["depends_on"] == [default_key("cpu"), *({"step": key, "allow_failure": True} for key in test_keys)]


def test_a_lane_whose_image_the_build_does_not_make_waits_for_nothing(write_lanes):
    def fixed(data):
        fixed_xpu_image(data)
        data["report"]["plugins"][0] = {next(iter(data["report"]["plugins"][0])): {"image": "python:3.12"}}
        del data["report"]["image_build_step"]

    pipeline = build_pipeline(["xpu", "cpu"], config_path=write_lanes(fixed))
    steps = conformance_steps(pipeline)
    xpu = [step for step in steps if step["key"].startswith("kvconform-test-xpu")]
    cpu = [step for step in steps if step["key"].startswith("kvconform-test-cpu")]
    assert xpu and all("depends_on" not in step and images(step) == [FIXED_IMAGE] for step in xpu)
    assert cpu and all(step["depends_on"] == [default_key("cpu")] for step in cpu)
    assert "depends_on" not in report_of(pipeline)


def test_a_lanes_own_key_overrides_the_default_and_its_depends_on_is_kept(write_lanes):
    def own(data):
        data["lanes"]["xpu"].update(image_build_step="xpu-image", depends_on=["lint", "xpu-image"])
        data["defaults"]["image_build_step"]["cuda"] = "cuda-image"

    pipeline = build_pipeline(["xpu", "cuda"], config_path=write_lanes(own))
    by_platform = {p: [s for s in conformance_steps(pipeline) if s["key"].startswith(f"kvconform-test-{p}")]
                   for p in ("xpu", "cuda")}
    assert all(step["depends_on"] == ["xpu-image", "lint"] for step in by_platform["xpu"])
    assert all(step["depends_on"] == ["cuda-image"] for step in by_platform["cuda"])


def test_a_per_build_image_with_no_build_step_is_an_error_naming_the_lane(write_lanes):
    path = write_lanes(lambda data: data["defaults"]["image_build_step"].pop("xpu"))
    with pytest.raises(LanesError, match=r":\d+: lanes\.xpu: its image .*BUILDKITE_COMMIT.* is made by this build "
                                         r".*set image_build_step or defaults\.image_build_step\.xpu"):
        load_lanes(path)


def test_a_build_step_for_an_image_the_build_does_not_make_is_an_error(write_lanes):
    path = write_lanes(lambda data: (fixed_xpu_image(data), data["lanes"]["xpu"].update(image_build_step="x")))
    with pytest.raises(LanesError, match=r":\d+: lanes\.xpu\.image_build_step: none of this step's images is made"):
        load_lanes(path)


@pytest.mark.parametrize("value", ["has space", "${KVCONFORM_X}", "$(touch pwned)", "${X:-a}${Y:-b}"])
def test_a_build_step_key_is_a_key_or_one_interpolated_key(write_lanes, value):
    path = write_lanes(lambda data: data["lanes"]["xpu"].update(image_build_step=value))
    with pytest.raises(LanesError, match=r"lanes\.xpu\.image_build_step: String should match pattern"):
        load_lanes(path)


# ---- the defaults a pipeline still relies on ----------------------------------------------------------


def test_references_read_nested_defaults():
    text = "${KVCONFORM_A:-repo:${BUILDKITE_COMMIT}-cpu} and ${KVCONFORM_B:-q} ${OTHER:-x} ${KVCONFORM_C:-open"
    assert list(_references(text)) == [("KVCONFORM_A", "repo:${BUILDKITE_COMMIT}-cpu"), ("KVCONFORM_B", "q")]


def test_the_cli_names_each_default_once_with_its_key_and_variable(capsys, monkeypatch):
    for platform in PLATFORMS:
        monkeypatch.delenv(f"KVCONFORM_{platform.upper()}_QUEUE", raising=False)
        monkeypatch.delenv(f"KVCONFORM_{platform.upper()}_IMAGE", raising=False)
        monkeypatch.delenv(f"KVCONFORM_{platform.upper()}_IMAGE_BUILD_STEP", raising=False)
    assert main(["pipeline", "--platform", "xpu"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "kvconform pipeline: placeholder: variables.xpu_queue = 'intel_gpu' (agent queue, a default: "
        "set KVCONFORM_XPU_QUEUE where the pipeline is uploaded)",
        "kvconform pipeline: placeholder: variables.xpu_image = "
        "'public.ecr.aws/q9t5s3a7/vllm-ci-test-repo:${BUILDKITE_COMMIT}-xpu' (image, a default: "
        "set KVCONFORM_XPU_IMAGE where the pipeline is uploaded)",
        "kvconform pipeline: placeholder: variables.xpu_image_build_step = 'image-build-xpu' (image build step, "
        "a default: set KVCONFORM_XPU_IMAGE_BUILD_STEP where the pipeline is uploaded)",
        # the report step runs in the CPU image
        "kvconform pipeline: placeholder: variables.cpu_queue = 'cpu_queue_premerge' (agent queue, a default: "
        "set KVCONFORM_CPU_QUEUE where the pipeline is uploaded)",
        "kvconform pipeline: placeholder: variables.cpu_image = "
        "'public.ecr.aws/q9t5s3a7/vllm-ci-test-repo:${BUILDKITE_COMMIT}-cpu' (image, a default: "
        "set KVCONFORM_CPU_IMAGE where the pipeline is uploaded)",
        "kvconform pipeline: placeholder: variables.cpu_image_build_step = 'image-build-cpu' (image build step, "
        "a default: set KVCONFORM_CPU_IMAGE_BUILD_STEP where the pipeline is uploaded)",
    ]


def test_a_variable_set_where_the_pipeline_is_generated_is_no_default():
    config = load_lanes()
    pipeline = build_pipeline(["cpu"])
    named = {p.variable for p in placeholders(pipeline, config, {})}
    assert named == {"KVCONFORM_CPU_QUEUE", "KVCONFORM_CPU_IMAGE", "KVCONFORM_CPU_IMAGE_BUILD_STEP"}
    environment = {"KVCONFORM_CPU_IMAGE_BUILD_STEP": "kvconform-bootstrap", "KVCONFORM_CPU_QUEUE": ""}
    assert {p.variable for p in placeholders(pipeline, config, environment)} == named - {
        "KVCONFORM_CPU_IMAGE_BUILD_STEP"}  # an empty variable is unset to upload's `:-`


def test_values_written_out_in_the_lanes_file_are_not_placeholders(write_lanes):
    def literal(data):
        fixed_xpu_image(data)
        data["lanes"]["xpu"]["agents"] = {"queue": "our-xpu-queue"}

    path = write_lanes(literal)
    found = placeholders(build_pipeline(["xpu"], config_path=path), load_lanes(path), {})
    assert [p.variable for p in found] == ["KVCONFORM_CPU_QUEUE", "KVCONFORM_CPU_IMAGE",
                                           "KVCONFORM_CPU_IMAGE_BUILD_STEP"]  # the report's, none of the xpu lane's


@pytest.mark.parametrize("where", ["lane", "defaults"])
def test_null_says_the_image_exists_before_the_build_and_drops_the_wait(write_lanes, where):
    def made_elsewhere(data):
        target = data["lanes"]["xpu"] if where == "lane" else data["defaults"]["image_build_step"]
        target.update({"image_build_step" if where == "lane" else "xpu": None})

    steps = conformance_steps(build_pipeline(["xpu"], config_path=write_lanes(made_elsewhere)))
    assert steps and all("depends_on" not in step for step in steps)


def test_the_gates_pipeline_waits_for_the_image_and_names_its_defaults(capsys, monkeypatch):
    monkeypatch.delenv("KVCONFORM_CPU_QUEUE", raising=False)
    selection = Selection(changed_files=("x.py",), connectors=("ExampleConnector",), reasons={}, files=(), wrapped={})
    assert emit_pipeline(selection, argparse.Namespace(platform="cpu", config=None, output=None)) == 0
    captured = capsys.readouterr()
    [step] = conformance_steps(yaml.safe_load(captured.out))
    assert step["depends_on"] == [default_key("cpu")]
    assert "kvconform gate: placeholder: variables.cpu_queue = 'cpu_queue_premerge'" in captured.err
