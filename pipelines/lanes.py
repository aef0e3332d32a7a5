"""The lanes file (``lanes.yaml``): where and how each platform's conformance steps run.

A CI owner edits the YAML, never the generator, so everything a lane can say is a
typed field here with ``extra="forbid"``: a misspelt key is an error naming the
file, line and key rather than a silently ignored setting. Beyond the shapes, the
loader checks what a schema cannot: groups and connectors that exist, a connector
run once per platform, backends and visibility variables that belong to the
lane's platform (read from ``platforms.PLATFORMS``), and the retry and soft-fail
policy in ``pipelines.policy``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from kvconform.conformance.connectors.profiles import ProfileError, load_profiles
from kvconform.conformance.session.yaml_models import load_yaml_model
from kvconform.platforms import PLATFORMS

from . import image_builds, policy
from .policy import KeyPath, Problem

LANES_FILE = Path(__file__).with_name("lanes.yaml")

# Lane and group names become parts of step keys and file names: keep them plain.
Name = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$", max_length=40)]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
StepKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_:-]+$", max_length=100)]
# A step key, or one that pipeline upload fills in: ``${KVCONFORM_CPU_IMAGE_BUILD_STEP:-image-build-cpu}``.
StepKeyRef = Annotated[str, StringConstraints(
    pattern=r"^(?:[A-Za-z0-9_:-]{1,100}|\$\{[A-Za-z_][A-Za-z0-9_]*:-[A-Za-z0-9_:-]{1,100}\})$")]
if TYPE_CHECKING:
    PlatformName = str  # a name from the platform table, which only exists at run time
else:
    PlatformName = Literal[tuple(PLATFORMS)]  # pydantic checks it against the table

# A third-party connector, as ``--connector`` takes it: package.module:ClassName.
THIRD_PARTY = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


class LanesError(Exception):
    """A lanes file that cannot be used; the message names the file, line and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetryRule(_Strict):
    """One Buildkite automatic-retry rule; which ones are allowed is ``pipelines.policy``."""

    exit_status: int | None = None
    signal_reason: str | None = None
    limit: int = Field(ge=1, le=10)

    @model_validator(mode="after")
    def _says_when(self) -> RetryRule:
        if self.exit_status is None and self.signal_reason is None:
            raise ValueError("a retry rule needs exit_status or signal_reason")
        return self

    def to_buildkite(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class Wrapper(_Strict):
    """A program the test command runs through, e.g. one that starts a container."""

    argv: list[str] = Field(min_length=1)
    # "arguments": the command's words follow argv; "string": the whole command is one
    # argument (for wrappers that run it with ``sh -c``).
    command_as: Literal["arguments", "string"] = "arguments"


class Container(_Strict):
    """The test command runs in ``image`` through ``docker run`` on the agent, written out in the step.

    Written into the step rather than a script: the step runs in the checkout of a
    vLLM pull request, which holds no kvconform file, on an agent that has docker
    and nothing of kvconform's.
    """

    image: str = Field(min_length=1)  # pipeline upload interpolates it (e.g. from $BUILDKITE_COMMIT)
    options: list[str] = Field(default_factory=list)  # docker run options: devices, groups, shm size


PluginEntry = str | dict[str, Any]


class RunSpec(_Strict):
    """Where a step runs and in what environment: shared by lanes and the report step."""

    agents: dict[str, str] = Field(min_length=1)
    env: dict[EnvName, str] = Field(default_factory=dict)
    plugins: list[PluginEntry] = Field(default_factory=list)
    wrapper: Wrapper | None = None
    container: Container | None = None
    timeout_in_minutes: int | None = Field(default=None, ge=1)
    # The step of the same build that makes this step's image, when the image is this build's own
    # (``pipelines/image_builds.py``); unset, ``defaults.image_build_step``; null, nothing to wait for.
    image_build_step: StepKeyRef | None = None

    @model_validator(mode="after")
    def _one_way_to_run(self) -> RunSpec:
        if self.wrapper is not None and self.container is not None:
            raise ValueError("give a wrapper or a container, not both")
        return self

    @field_validator("plugins")
    @classmethod
    def _one_plugin_per_entry(cls, plugins: list[PluginEntry]) -> list[PluginEntry]:
        for entry in plugins:
            if isinstance(entry, dict) and len(entry) != 1:
                raise ValueError("each plugins entry is one mapping of plugin name -> its settings")
        return plugins


class Lane(RunSpec):
    """One row of CI: a platform's agents and the connector groups they run."""

    platform: PlatformName
    groups: list[Name] | None = Field(default=None, min_length=1)  # None: every group
    parallelism: int | None = Field(default=None, ge=1, le=100)
    xdist_workers: int = Field(default=1, ge=1, le=64)
    attn_backends: list[str] = Field(default_factory=list)
    devices: int = Field(default=1, ge=1)
    depends_on: list[StepKey] = Field(default_factory=list)
    retry: list[RetryRule] | None = None  # None: defaults.retry
    experimental: bool = False
    soft_fail: bool | list[int] = False
    reason: str | None = None


class Defaults(_Strict):
    timeout_in_minutes: int = Field(default=60, ge=1)
    retry: list[RetryRule] = Field(default_factory=list)
    # platform -> step key; null: that platform's image exists before the build starts
    image_build_step: dict[PlatformName, StepKeyRef | None] = Field(default_factory=dict)


class LanesConfig(_Strict):
    # Values the lanes refer to by YAML alias (queues, images, plugin versions), written once at the
    # top of the file; the parser resolves the aliases, so no code reads this.
    variables: dict[str, str] = Field(default_factory=dict)
    connector_groups: dict[Name, list[str]] = Field(min_length=1)
    defaults: Defaults = Field(default_factory=Defaults)
    lanes: dict[Name, Lane] = Field(min_length=1)
    report: RunSpec

    def grouped(self) -> set[str]:
        """Every connector some connector group lists."""
        return {name for names in self.connector_groups.values() for name in names}

    def group_names(self, lane: Lane) -> list[str]:
        return list(lane.groups) if lane.groups is not None else list(self.connector_groups)

    def lanes_of(self, platform: str) -> list[tuple[str, Lane]]:
        return [(name, lane) for name, lane in self.lanes.items() if lane.platform == platform]

    def retry_of(self, lane: Lane | None) -> list[RetryRule]:
        return list(lane.retry) if lane is not None and lane.retry is not None else list(self.defaults.retry)

    def timeout_of(self, spec: RunSpec) -> int:
        return spec.timeout_in_minutes or self.defaults.timeout_in_minutes


# ---- checks a schema cannot express -------------------------------------------------------------


def _known_connectors() -> set[str]:
    try:
        return set(load_profiles().connectors)
    except ProfileError as exc:
        raise LanesError(f"cannot check connector names: {exc}") from None


def is_connector_name(name: str) -> bool:
    """A connector from ``conformance/connectors.yaml`` or a third-party ``package.module:ClassName``."""
    return bool(THIRD_PARTY.match(name)) or name in _known_connectors()


def _connector_problems(config: LanesConfig) -> Iterator[Problem]:
    known = _known_connectors()
    for group, names in config.connector_groups.items():
        if not names:
            yield ("connector_groups", group), "a connector group lists at least one connector"
        for index, name in enumerate(names):
            if name in known or THIRD_PARTY.match(name):
                continue
            yield ("connector_groups", group, index), (
                f"unknown connector {name!r}: name one from conformance/connectors.yaml "
                f"({', '.join(sorted(known))}) or a third-party package.module:ClassName")


def _group_problems(config: LanesConfig) -> Iterator[Problem]:
    """Groups exist, and each platform runs each connector once (in one lane, one group)."""
    runs: dict[tuple[str, str], str] = {}  # (platform, connector) -> "lane/group" that runs it
    for name, lane in config.lanes.items():
        for index, group in enumerate(config.group_names(lane)):
            if group not in config.connector_groups:
                yield ("lanes", name, "groups", index), (
                    f"unknown connector group {group!r}; groups: {', '.join(config.connector_groups)}")
                continue
            for connector in config.connector_groups[group]:
                where = f"{name}/{group}"
                first = runs.setdefault((lane.platform, connector), where)
                if first != where:
                    yield ("lanes", name, "groups", index), (
                        f"{connector} would run twice on {lane.platform}: in {first} and in {where}")


def _platform_problems(config: LanesConfig) -> Iterator[Problem]:
    """Backends and device-visibility variables must be the lane's platform's own."""
    everyone_visibility = {var for spec in PLATFORMS.values() for var in spec.visibility_vars}
    for name, lane in config.lanes.items():
        spec = PLATFORMS[lane.platform]
        for index, backend in enumerate(lane.attn_backends):
            if backend not in spec.backends:
                yield ("lanes", name, "attn_backends", index), (
                    f"{backend} cannot serve KV connectors on {spec.name}; choose from: {', '.join(spec.backends)}")
        for var, value in lane.env.items():
            if var in everyone_visibility and var not in spec.visibility_vars:
                owners = ", ".join(p.name for p in PLATFORMS.values() if var in p.visibility_vars)
                yield ("lanes", name, "env", var), (
                    f"{var} selects devices on {owners}, not on {spec.name}"
                    + (f" (use {', '.join(spec.visibility_vars)})" if spec.visibility_vars else ""))
            elif var in spec.visibility_vars and "$" not in value:
                listed = [item for item in value.split(",") if item.strip()]
                if len(listed) != lane.devices:
                    yield ("lanes", name, "env", var), (f"{var}={value!r} makes {len(listed)} device(s) visible "
                                                        f"but the lane says devices: {lane.devices}")


RULES = (_connector_problems, _group_problems, _platform_problems, *policy.RULES, *image_builds.RULES)


def _line_of(text: str, location: KeyPath) -> int | None:
    """The line of the deepest part of ``location`` that the YAML document has.

    Walks the YAML node tree, so ``("lanes", "xpu", "platform")`` finds the xpu lane's line,
    not the first ``platform:`` in the file.
    """
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in location:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _error(path: Path, text: str, location: KeyPath, message: str) -> LanesError:
    line = _line_of(text, location)
    key = ".".join(str(part) for part in location)
    return LanesError(f"{path}{f':{line}' if line else ''}: {key}: {message}")


def _pinpoint(path: Path, fallback: LanesError) -> LanesError:
    """A schema error located by key path, a misspelt key reported before the key it lacks.

    ``load_yaml_model`` reports pydantic's first error at the first line that
    starts with its last key; in a lanes file most keys repeat once per lane, and
    a typo of a required key shows up first as that key missing.
    """
    try:
        text = path.read_text()
        LanesConfig.model_validate(yaml.safe_load(text) or {})
    except ValidationError as exc:
        first = min(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
        return _error(path, text, tuple(first["loc"]), first["msg"])
    except (OSError, yaml.YAMLError):
        pass
    return fallback


def load_lanes(path: Path | str | None = None) -> LanesConfig:
    """Load and check a lanes file (default: the shipped ``pipelines/lanes.yaml``)."""
    path = Path(path) if path is not None else LANES_FILE
    try:
        config = load_yaml_model(path, LanesConfig, LanesError)
    except LanesError as exc:
        raise _pinpoint(path, exc) from None
    for rule in RULES:
        for location, message in rule(config):
            raise _error(path, path.read_text(), location, message)
    return config
