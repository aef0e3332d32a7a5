"""What kvconform requires, as a guest in another project's test environment.

kvconform is installed beside vLLM CI's pinned test tools, so it requires ranges: pip keeps an
installed version that satisfies a requirement, and a plugin whose pins replace its host's pytest
is one a CI owner removes. Both ends of each range are run by the project: `.ci/constraints.txt`
(the newest, every project environment) and `.ci/oldest.txt` (the floors, `make test-oldest`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
# vLLM's requirements/test.txt pins these exactly (at a stored commit of vLLM's main)
VLLM_CI_PINS = {"pytest": "8.3.3", "pytest-timeout": "2.3.1", "pyyaml": "6.0.2"}


def requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}


def pins(name: str) -> dict[str, Version]:
    """A pins file (`name==version` lines, comments after #) as canonical name -> version."""
    found = {}
    for line in (ROOT / ".ci" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (spec,) = requirement.specifier
            assert spec.operator == "==", f".ci/{name}: {line!r} is not an exact pin"
            found[canonicalize_name(requirement.name)] = Version(spec.version)
    return found


def floor(requirement: Requirement) -> Version:
    (low,) = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return low


def test_every_requirement_is_a_range_with_a_floor_and_a_cap():
    for requirement in requirements().values():
        operators = sorted(s.operator for s in requirement.specifier)
        assert operators == ["<", ">="], f"{requirement}: expected a floor (>=) and a cap (<), not {operators}"


def test_oldest_pins_are_exactly_the_floors():
    oldest = pins("oldest.txt")
    for name, requirement in requirements().items():
        assert oldest.get(name) == floor(requirement), (
            f"{requirement}: .ci/oldest.txt pins {name}=={oldest.get(name)}, the floor is {floor(requirement)}")


@pytest.mark.parametrize("name", ["constraints.txt", "oldest.txt"])
def test_each_end_lies_in_the_range(name):
    pinned = pins(name)
    for dist, requirement in requirements().items():
        if dist in pinned:
            version = pinned[dist]
            assert requirement.specifier.contains(version), f".ci/{name}: {dist}=={version} not in {requirement}"


@pytest.mark.parametrize("dist,version", sorted(VLLM_CI_PINS.items()))
def test_vllm_ci_pins_satisfy_the_requirements_so_pip_keeps_them(dist, version):
    requirement = requirements()[dist]
    assert requirement.specifier.contains(version), f"{requirement} would replace vLLM CI's {dist}=={version}"
