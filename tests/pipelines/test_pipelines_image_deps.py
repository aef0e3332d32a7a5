"""What a step installs beside kvconform's wheel in a vLLM CI image: only what is missing, never an upgrade."""

from __future__ import annotations

import pytest

from kvconform.pipelines.image_deps import plan, requirements, satisfies

# vLLM CI's test environment at one stored commit (vLLM's requirements/test.txt): pytest pinned, no pytest-xdist.
VLLM_CI = {"pytest": "8.3.3", "pytest-timeout": "2.3.1", "pyyaml": "6.0.2", "pydantic": "2.11.7",
           "hypothesis": "6.131.0"}


def test_only_missing_packages_are_installed_and_differing_ones_are_kept_with_a_note():
    reqs = ["pytest==9.2.0", "pytest-xdist<4,>=3.5", "pytest-timeout<3,>=2.3.1", "PyYAML<7,>=6.0.1",
            "pydantic<3,>=2.12", "hypothesis<7,>=6.148"]
    missing, notes = plan(reqs, lambda name: VLLM_CI.get(name.lower()))
    assert missing == ["pytest-xdist<4,>=3.5"]
    assert notes == ["kvconform: using the image's pytest 8.3.3 (kvconform asks for pytest==9.2.0)",
                     "kvconform: using the image's pydantic 2.11.7 (kvconform asks for pydantic<3,>=2.12)",
                     "kvconform: using the image's hypothesis 6.131.0 (kvconform asks for hypothesis<7,>=6.148)"]


def test_requirements_leave_out_the_extras_and_all_are_installed_when_none_is_there():
    reqs = requirements()
    assert reqs and not [r for r in reqs if "extra" in r]
    assert plan(reqs, lambda name: None)[0] == [r.partition(";")[0].strip() for r in reqs]


@pytest.mark.parametrize("version, specifier, ok", [
    ("8.3.3", ">=8.3,<10", True), ("8.3.3", "==9.2.0", False), ("9.2.0", "==9.2.0", True), ("2.0", "<2", False),
])
def test_satisfies(version, specifier, ok):
    assert satisfies(version, specifier) is ok
