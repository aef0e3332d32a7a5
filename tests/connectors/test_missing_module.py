"""A missing module is a skip only when it is the connector's declared package.

``needs.load_or_skip`` is kvconform's own code; the connector here is a stand-in
whose class loading raises the ``ModuleNotFoundError`` Python would raise.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from _pytest.outcomes import Failed, Skipped

from kvconform.conformance.connectors.profiles import ConnectorProfile, Requires
from kvconform.conformance.connectors.requirements import load_or_skip


@dataclass
class MissingModuleConnector:
    name: str
    missing: str
    profile: ConnectorProfile

    def load_class(self):
        raise ModuleNotFoundError(f"No module named '{self.missing}'", name=self.missing)


def _connector(missing: str, packages: list[str]) -> MissingModuleConnector:
    return MissingModuleConnector("SomeConnector", missing, ConnectorProfile(requires=Requires(packages=packages)))


@pytest.mark.parametrize("missing", ["lmcache", "lmcache.integration.vllm"])
def test_the_declared_package_missing_is_a_skip_that_names_it(missing):
    with pytest.raises(Skipped, match="missing package lmcache: No module named"):
        load_or_skip(_connector(missing, ["lmcache"]))


def test_a_missing_vllm_module_is_a_failure_that_names_it():
    with pytest.raises(Failed) as info:
        load_or_skip(_connector("vllm.v1.simple_kv_offload.worker", ["lmcache"]))
    assert "it imports vllm.v1.simple_kv_offload.worker, which the installed vLLM does not have" in str(info.value)


def test_an_undeclared_package_is_a_failure_too():
    with pytest.raises(Failed, match="module 'zmqx' is missing, and it is not a package the connector's profile "
                                     r"declares \(requires.packages: lmcache\)"):
        load_or_skip(_connector("zmqx", ["lmcache"]))


def test_a_package_whose_name_only_starts_alike_is_not_declared():
    with pytest.raises(Failed):
        load_or_skip(_connector("lmcache_extra", ["lmcache"]))
