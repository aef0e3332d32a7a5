"""Which connectors a run covers, and how each is loaded.

Names come from the installed vLLM's ``KVConnectorFactory`` registry: the names its
factory registers, then those the installed vLLM plugins register (``vllm_install/plugins.py``);
a ``package.module:ClassName`` spec is a third-party connector, loaded the way vLLM
loads one (``KVTransferConfig.kv_connector_module_path``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kvconform.reports.identity import ConnectorUnderTest

from ..session.target import TARGET_KEY, run_target
from ..vllm_install.factory import FactorySourceError, installed_factory_file, parse_registrations
from ..vllm_install.plugins import PluginConnector, PluginRegistry, discover, register_in_vllm
from .profiles import ConnectorProfile, has_profile, profile_for

if TYPE_CHECKING:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1


class ConnectorSpecError(Exception):
    """A ``--connector`` value that names nothing usable."""


@dataclass(frozen=True)
class ConnectorParam(ConnectorUnderTest):
    """One connector under test: what a test's ``connector`` parameter is."""

    name: str  # the factory name, or the class name of a third-party connector
    class_name: str
    module_path: str | None  # set for third-party connectors only
    profile: ConnectorProfile
    variant: str | None = None  # a profile variant (``variants`` in connectors.yaml), shown in the test id
    # False: kvconform profiles it (a connector new in a later vLLM) but the installed vLLM does not register it
    registered: bool = True
    plugin: PluginConnector | None = None  # set for a connector a vLLM plugin registers

    @property
    def id(self) -> str:
        return f"{self.name}@{self.variant}" if self.variant else self.name

    @property
    def is_third_party(self) -> bool:
        """Out of vLLM's tree: a ``module:Class`` spec, or a connector a vLLM plugin registers."""
        return self.module_path is not None or self.plugin is not None

    def last_child(self) -> ConnectorParam:
        """A wrapper's last child (MultiConnector's ``connectors`` in its extra config), as the wrapper would build
        it, run alone; any other connector is itself. What the workload's peer engine runs (workload/peer.py)."""
        kids = self.profile.extra_config.get("connectors")
        if not isinstance(kids, list) or not kids:
            return self
        child = kids[-1]
        name = child["kv_connector"]
        profile = ConnectorProfile(extra_config=child.get("kv_connector_extra_config") or {},
                                   roles=[child.get("kv_role", "kv_both")], checks=["workload"])
        return ConnectorParam(name, name, child.get("kv_connector_module_path"), profile)

    def transfer_config_fields(self) -> dict[str, Any]:
        """The KVTransferConfig fields that select this connector."""
        fields = {"kv_connector": self.class_name if self.module_path else self.name}
        if self.module_path:
            fields["kv_connector_module_path"] = self.module_path
        return fields

    def load_class(self) -> type[KVConnectorBase_V1]:
        """The connector class, loaded through vLLM's factory (third-party: its module path; a plugin's: once
        vLLM has loaded its plugins, as its workers do before building a connector)."""
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

        cls: type[KVConnectorBase_V1]
        if self.module_path:
            cls = getattr(importlib.import_module(self.module_path), self.class_name)
        else:
            if self.plugin is not None:
                register_in_vllm(self.plugin)
            cls = KVConnectorFactory.get_connector_class_by_name(self.name)
        return cls

    def source_file(self) -> Path | None:
        """The connector's module source, found without importing it."""
        module = self.module_path or registry_modules().get(self.name, (None, None))[0]
        if module is None:
            return None
        spec = importlib.util.find_spec(module)
        return Path(spec.origin) if spec and spec.origin else None


def registry_modules() -> dict[str, tuple[str, str]]:
    """name -> (module, class) for every connector the installed vLLM registers: its factory's, then its plugins'."""
    in_tree = factory_registry()
    return {**in_tree, **{name: (plugin.module_path, plugin.class_name)
                          for name, plugin in discover(in_tree).connectors.items()}}


def plugin_registry() -> PluginRegistry:
    """What the installed vLLM plugins register beside the factory's connectors (``vllm_install/plugins.py``)."""
    return discover(factory_registry())


def factory_registry() -> dict[str, tuple[str, str]]:
    """name -> (module, class) for every connector the installed vLLM's factory registers.

    Read from the factory's source (``vllm_install/factory.py``), not by importing
    it: the registrations are literal calls in that one file, and listing or
    validating names then costs no vLLM import in processes that run no test.
    """
    path = installed_factory_file()
    if path is None:
        raise ConnectorSpecError("vLLM is not installed: no connector factory to read the registry from")
    try:
        return parse_registrations(path.read_text(), str(path))
    except FactorySourceError as exc:
        raise ConnectorSpecError(str(exc)) from None


def registered_names() -> list[str]:
    return list(registry_modules())


def unprofiled_registered(extra_profiles: tuple[Path, ...] = ()) -> list[str]:
    """The connectors the installed vLLM registers that no profile names (kvconform's or ``extra_profiles``);
    none where no vLLM factory can be read (the run then stops elsewhere, in its own words)."""
    try:
        names = registered_names()
    except (ConnectorSpecError, ImportError):
        return []
    return [name for name in names if not has_profile(name, extra_profiles)]


def unknown_connector(name: str, known: list[str]) -> str:
    """``unknown connector 'ExampleConector': did you mean ExampleConnector?``; every name only without a guess."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.8) or [
        k for k in known if name.lower() in k.lower() or k.lower() in name.lower()][:3]
    if close:
        return f"unknown connector {name!r}: did you mean {' or '.join(close)}?"
    return f"unknown connector {name!r}; known connectors: {', '.join(known)}"


def _third_party(spec: str, extra_profiles: tuple[Path, ...]) -> ConnectorParam:
    module, _, class_name = spec.partition(":")
    if not module or not class_name:
        raise ConnectorSpecError(f"--connector {spec!r}: expected package.module:ClassName")
    try:
        imported = importlib.import_module(module)
    except Exception as exc:
        raise ConnectorSpecError(f"--connector {spec}: module {module!r} does not import: "
                                 f"{type(exc).__name__}: {exc}") from None
    cls = getattr(imported, class_name, None)
    if cls is None:
        raise ConnectorSpecError(f"--connector {spec}: module {module!r} has no attribute {class_name!r}")
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

    if not (isinstance(cls, type) and issubclass(cls, KVConnectorBase_V1)):
        raise ConnectorSpecError(f"--connector {spec}: {class_name} is not a KV connector "
                                 f"(not a subclass of KVConnectorBase_V1)")
    return ConnectorParam(class_name, class_name, module, profile_for(class_name, extra_profiles))


def _registered(name: str, plugin: PluginConnector | None, extra_profiles: tuple[Path, ...]) -> ConnectorParam:
    """A connector the installed vLLM registers by name: its factory's, or a plugin's (which loads its plugin)."""
    class_name = plugin.class_name if plugin else name
    return ConnectorParam(name, class_name, None, profile_for(name, extra_profiles), plugin=plugin)


def resolve_connectors(requested: tuple[str, ...] | list[str],
                       extra_profiles: tuple[Path, ...] = ()) -> list[ConnectorParam]:
    """The connectors to test: every registered one, or those requested, validated."""
    if requested and all(":" in spec for spec in requested):  # third-party only: no registry needed
        return [_third_party(spec, extra_profiles) for spec in requested]
    known = registered_names()
    plugins = plugin_registry().connectors
    if not requested:
        return [_registered(n, plugins.get(n), extra_profiles) for n in known]
    params = []
    for spec in requested:
        if ":" in spec:
            params.append(_third_party(spec, extra_profiles))
        elif spec in known:
            params.append(_registered(spec, plugins.get(spec), extra_profiles))
        elif has_profile(spec, extra_profiles):  # a pipeline of one vLLM's lanes, run on another vLLM
            params.append(ConnectorParam(spec, spec, None, profile_for(spec, extra_profiles), registered=False))
        else:
            raise ConnectorSpecError(unknown_connector(spec, known))
    return params


_CACHE_KEY = pytest.StashKey[list[ConnectorParam]]()


def with_variants(params: list[ConnectorParam], platform: str) -> list[ConnectorParam]:
    """Each connector followed by its profile's variants that apply on ``platform``."""
    out = []
    for param in params:
        out.append(param)
        out += [replace(param, profile=param.profile.as_variant(name), variant=name)
                for name, variant in param.profile.variants.items()
                if variant.platforms is None or platform in variant.platforms]
    return out


def connector_params(config: pytest.Config, definition: pytest.Item | None = None) -> list[ConnectorParam]:
    if _CACHE_KEY not in config.stash:
        target = run_target(config)
        config.stash[_CACHE_KEY] = with_variants(resolve_connectors(target.connectors, target.profiles),
                                                 target.platform.name)
    return config.stash[_CACHE_KEY]


def header_params(config: pytest.Config) -> list[ConnectorParam]:
    """The run's connectors, for its header's lines: none where the run has no target or its connectors do not
    resolve (the run stops elsewhere, in its own words)."""
    if TARGET_KEY not in config.stash:
        return []
    try:
        return connector_params(config)
    except (ConnectorSpecError, ImportError):
        return []
