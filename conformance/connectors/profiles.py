"""Connector profiles: the data in ``connectors.yaml``, loaded into typed models.

A typo in a profile is an error naming the file, the connector and the key,
not a silently ignored setting.
"""

from __future__ import annotations

import copy
import re
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from kvconform.check_table import PROFILE_KEYS

from ..session.yaml_models import load_yaml_model
from .service_spec import ServiceSpec

PROFILES_FILE = Path(__file__).resolve().parents[1] / "connectors.yaml"


def _profile_key(name: str) -> str:
    if name not in PROFILE_KEYS:
        raise ValueError(f"no check {name!r}; a profile lists any of {', '.join(PROFILE_KEYS)}")
    return name


# a check a profile may list: a row of the check table that gates itself (load_failure rides on roundtrip)
Check = Annotated[str, AfterValidator(_profile_key)]
Role = Literal["kv_both", "kv_producer", "kv_consumer"]
# "exclusive": the connector may bind fixed resources of the host (ports, shared-memory names), so under -n N its
# tests never run on two workers at once (reliability/host_lock.py); "shared": any number of instances side by side
Host = Literal["shared", "exclusive"]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what extra_config expands; env is set before a test's folders and servers exist, so none of it applies there
PLACEHOLDER = re.compile(r"\{(storage|device|[\w-]+\.(port:[\w-]+|dir))\}")


class ProfileError(Exception):
    """A malformed profiles file; the message names the file, line and key."""


class Requires(BaseModel):
    model_config = ConfigDict(extra="forbid")
    packages: list[str] = Field(default_factory=list)
    platforms: list[str] | None = None


class Variant(BaseModel):
    """A second way to run a connector: what it changes in the profile (a key left out keeps the profile's), and
    the platforms where it applies (NIXL with a device-memory buffer; MultiConnector over busier children)."""

    model_config = ConfigDict(extra="forbid")
    kv_buffer_device: str | None = None
    extra_config: dict[str, Any] | None = None
    checks: list[Check] | None = None
    scheduler_half: bool | None = None  # False: a variant that runs its worker half skips the scheduler-half check
    scenarios: list[str] | None = None  # the workload check's hand-written scenarios it runs (default: every one)
    platforms: list[str] | None = None  # where the variant runs (default: everywhere); elsewhere not a parameter


class ConnectorProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    extra_config: dict[str, Any] = Field(default_factory=dict)
    kv_buffer_device: str | None = None
    roles: list[Role] | None = None
    checks: list[Check] | None = None
    requires: Requires = Field(default_factory=Requires)
    wraps: list[str] = Field(default_factory=list)
    hybrid: bool = False
    reason: str | None = None
    refusal: str | None = None  # regex: an error at construction matching it is the connector refusing this platform
    variants: dict[str, Variant] = Field(default_factory=dict)
    # its scheduler half runs in vLLM's Scheduler with its worker half played by a worker-results feeder
    # (checks/scheduler_half.py): for a connector whose worker half refuses a platform (OffloadingConnector on CPU)
    scheduler_half: bool = False
    promised_hit: str | None = None  # a name from checks/claims.py's PROMISED_HITS: the range of hits it promises
    # the workload scenarios (workload/scenarios.py) it runs, none generated: settings that serve one situation
    # (a tier small enough to evict); None: every scenario and the generated workloads
    scenarios: list[str] | None = None
    services: dict[str, ServiceSpec] = Field(default_factory=dict)  # servers it needs (connectors/services.py)
    host: Host = "shared"  # "exclusive" for a connector no profile names (``profile_for``)
    env: dict[str, str] = Field(default_factory=dict)  # set around each of its tests (connectors/connector_env.py)
    # False only for the defaults ``profile_for`` gives a connector that no profile names (never read from a file)
    _named: bool = PrivateAttr(default=True)

    @property
    def named(self) -> bool:
        """Whether a profile names the connector; False: it runs ``profile_for``'s defaults, and whether it can be
        built here at all is asked once before its checks run (``construction.py``)."""
        return self._named

    def as_variant(self, name: str) -> ConnectorProfile:
        """This profile with variant ``name``'s settings (and no variants of its own)."""
        changes = self.variants[name].model_dump(exclude={"platforms"}, exclude_none=True)
        return self.model_copy(update={**changes, "variants": {}})

    @field_validator("env", mode="before")
    @classmethod
    def _literal_strings(cls, env: Any) -> Any:
        """Names a shell accepts, and string values: YAML reads ``1`` and ``yes`` as a number and a boolean."""
        if not isinstance(env, dict):
            return env  # pydantic's own message: a mapping is expected
        for name, value in env.items():
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name (letters, digits, _)")
            if not isinstance(value, str):
                raise ValueError(f"{name}: {value!r} is a {type(value).__name__}; env values are strings "
                                 f"(quote it: {name}: \"{value}\")")
            if PLACEHOLDER.search(value):
                raise ValueError(f"{name}: {value!r}: env values are set as written (no placeholders: they are "
                                 f"set before the test's storage folder and servers exist)")
        return env

    @field_validator("promised_hit")
    @classmethod
    def _known_promise(cls, name: str | None) -> str | None:
        from ..checks.claims import PROMISED_HITS

        if name is not None and name not in PROMISED_HITS:
            raise ValueError(f"unknown promised_hit {name!r}; known: {', '.join(PROMISED_HITS)}")
        return name

    def runs(self, check: str) -> bool:
        return check in (self.checks or [])

    def is_pair(self) -> bool:
        return set(self.roles or []) == {"kv_producer", "kv_consumer"}

    def render_extra_config(self, storage: Path, services: dict[str, str] | None = None) -> dict[str, Any]:
        """The extra config with ``{storage}`` replaced by this test's own folder, and its servers'
        ``{NAME.port:P}`` / ``{NAME.dir}`` by where they run (``conformance/connectors/services.py``)."""
        rendered: dict[str, Any] = _substitute(copy.deepcopy(self.extra_config),
                                               {"storage": str(storage), **(services or {})})
        return rendered


def _default_roles() -> list[Role]:
    return ["kv_both"]


def _default_checks() -> list[Check]:
    return ["contract", "lint"]


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    roles: list[Role] = Field(default_factory=_default_roles)
    checks: list[Check] = Field(default_factory=_default_checks)


class ProfilesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: Defaults = Field(default_factory=Defaults)
    connectors: dict[str, ConnectorProfile] = Field(default_factory=dict)


def _substitute(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in mapping.items():
            value = value.replace("{" + key + "}", replacement)
        return value
    if isinstance(value, list):
        return [_substitute(v, mapping) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, mapping) for k, v in value.items()}
    return value


@cache
def load_profiles(path: Path = PROFILES_FILE) -> ProfilesFile:
    profiles = load_yaml_model(path, ProfilesFile, ProfileError)
    for profile in profiles.connectors.values():
        profile.roles = profile.roles or list(profiles.defaults.roles)
        profile.checks = profile.checks if profile.checks is not None else list(profiles.defaults.checks)
    return profiles


# What a connector that no profile names runs, beside the defaults' checks: every check that needs nothing of it but
# a storage folder of its own (a profile adds the others and says what it promises)
NO_PROFILE_CHECKS: tuple[Check, ...] = ("roundtrip", "workload")
NO_PROFILE_REASON = "no profile names it; a profile (--profiles FILE) says which checks apply"


def _row(name: str, extra_files: tuple[Path, ...]) -> ConnectorProfile | None:
    """``name``'s row: from a user's ``--profiles`` file first, then kvconform's own; None where none names it."""
    for path in (*extra_files, PROFILES_FILE):
        profiles = load_profiles(Path(path))
        if name in profiles.connectors:
            return profiles.connectors[name]
    return None


def has_profile(name: str, extra_files: tuple[Path, ...] = ()) -> bool:
    return _row(name, extra_files) is not None


def profile_for(name: str, extra_files: tuple[Path, ...] = ()) -> ConnectorProfile:
    """The profile of ``name``: from a user's ``--profiles`` file first, then kvconform's own.

    A connector without a row gets the defaults plus the checks that need no profile, with a
    ``shared_storage_path`` of its own (the usual shape of a third-party storage connector), and the host to
    itself (``host: exclusive``): it may bind fixed ports from its own defaults.
    """
    row = _row(name, extra_files)
    if row is not None:
        return row
    defaults = load_profiles(PROFILES_FILE).defaults
    unnamed = ConnectorProfile(roles=list(defaults.roles), checks=[*NO_PROFILE_CHECKS, *defaults.checks],
                               extra_config={"shared_storage_path": "{storage}"}, reason=NO_PROFILE_REASON,
                               host="exclusive")
    unnamed._named = False
    return unnamed
