"""Which step of the build makes a step's image, so that the step waits for it.

vLLM CI tests a commit in images that the same Buildkite build makes, each in a step of
its own (tagged with the commit, ``$BUILDKITE_COMMIT``, or the build's id). A step that
pulls such an image before that step has pushed it fails on a missing image, or tests
what an earlier build pushed under the same tag. So a lane (or the report) whose image
names one of ``PER_BUILD_VARIABLES`` depends on the step that makes it: the lane's
``image_build_step``, else its platform's entry in ``defaults.image_build_step`` (null:
the image exists before the build starts, e.g. made by another pipeline). A lane whose
images are not made by the build gets no such dependency. Rules here yield
``(location in the lanes file, message)`` like ``pipelines.policy``'s, so the loader
points at the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from .policy import KeyPath, Problem


# The fields of a lanes file these rules read, as protocols (as ``pipelines.policy`` does), so this module sits
# below ``pipelines.lanes``, which applies its rules while loading, instead of importing it back.
class Container(Protocol):
    @property
    def image(self) -> str: ...


class RunSpec(Protocol):
    @property
    def container(self) -> Container | None: ...
    @property
    def plugins(self) -> Sequence[Any]: ...
    @property
    def image_build_step(self) -> str | None: ...
    @property
    def model_fields_set(self) -> set[str]: ...


class Lane(RunSpec, Protocol):
    @property
    def platform(self) -> str: ...


class Defaults(Protocol):
    @property
    def image_build_step(self) -> Mapping[str, str | None]: ...


class LanesConfig(Protocol):
    @property
    def defaults(self) -> Defaults: ...
    @property
    def lanes(self) -> Mapping[str, Lane]: ...
    @property
    def report(self) -> RunSpec: ...

# Variables whose value is this build's own: an image named with one is made by a step of this build.
PER_BUILD_VARIABLES = ("BUILDKITE_COMMIT", "BUILDKITE_BUILD_ID", "BUILDKITE_BUILD_NUMBER")
_PER_BUILD = re.compile(r"\$\{?(?:" + "|".join(PER_BUILD_VARIABLES) + r")\b")


def images_of(spec: RunSpec) -> list[str]:
    """The images a step pulls: its container's, and any plugin's ``image`` setting (the docker plugin's)."""
    images = [spec.container.image] if spec.container is not None else []
    for entry in spec.plugins:
        settings = entry.values() if isinstance(entry, dict) else []
        images += [each["image"] for each in settings if isinstance(each, dict) and isinstance(each.get("image"), str)]
    return images


def per_build_images(spec: RunSpec) -> list[str]:
    """The step's images that this build makes (their names carry the commit or the build)."""
    return [image for image in images_of(spec) if _PER_BUILD.search(image)]


def _declared(config: LanesConfig, spec: RunSpec, platform: str | None) -> tuple[bool, str | None]:
    """(whether the lanes file says which step makes ``spec``'s image, that step's key).

    The lane's own ``image_build_step``, else its platform's ``defaults.image_build_step`` entry;
    either may be null: the image exists before the build starts, nothing to wait for.
    """
    if "image_build_step" in spec.model_fields_set:
        return True, spec.image_build_step
    if platform is not None and platform in config.defaults.image_build_step:
        return True, config.defaults.image_build_step[platform]
    return False, None


def build_step_of(config: LanesConfig, spec: RunSpec, platform: str | None) -> str | None:
    """The key of the step that makes ``spec``'s image; None when this build does not make it.

    ``platform``: the lane's, whose ``defaults.image_build_step`` entry applies (None for the report).
    """
    return _declared(config, spec, platform)[1] if per_build_images(spec) else None


def _run_problems(config: LanesConfig, where: KeyPath, spec: RunSpec, platform: str | None) -> Iterator[Problem]:
    images = per_build_images(spec)
    if images and not _declared(config, spec, platform)[0]:
        fallback = f" or defaults.image_build_step.{platform}" if platform is not None else ""
        yield where, (f"its image {images[0]!r} is made by this build (it names {'/'.join(PER_BUILD_VARIABLES)}) "
                      f"but no step key says which step makes it: set image_build_step{fallback} "
                      "(vLLM CI's keys are in pipelines/lanes.yaml; null: the image exists before the build)")
    if not images and spec.image_build_step is not None:
        yield (*where, "image_build_step"), (
            "none of this step's images is made by this build (none names "
            f"{'/'.join(PER_BUILD_VARIABLES)}), so there is no image build to wait for; remove it")


def _image_build_problems(config: LanesConfig) -> Iterator[Problem]:
    for name, lane in config.lanes.items():
        yield from _run_problems(config, ("lanes", name), lane, lane.platform)
    yield from _run_problems(config, ("report",), config.report, None)


RULES = (_image_build_problems,)
