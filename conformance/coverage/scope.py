"""Which source files connector coverage measures, and which of them are a connector's own.

Measuring starts before vLLM is imported (a module's top level runs once, at import), so every file is
found from the installed packages' folders, never by importing anything. What is measured: vLLM's
``distributed/kv_transfer`` (every in-tree connector and the code they share), the folders ``EXTRA_OWN``
gives, and each third-party connector's package. A connector's own files: the module that defines its
class and, where that module sits in a package of its own (``nixl/``, ``mooncake/``) or is one, that
package; plus its ``EXTRA_OWN`` folders. The percentage a report shows for a connector is over its own
files; the shared files it reached (base.py, the factory, utils) are listed beside them, not counted.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from ..vllm_install.factory import FactorySourceError, installed_factory_file, parse_registrations

MEASURED_IN_VLLM = ("distributed/kv_transfer",)  # folders under vllm/ measured whatever connectors run
_V1 = "distributed/kv_transfer/kv_connector/v1"
# In-tree connectors whose own code lies beyond their module's package: name -> folders under vllm/.
EXTRA_OWN: dict[str, tuple[str, ...]] = {
    "OffloadingConnector": (f"{_V1}/offloading", "v1/kv_offload"),
    "SimpleCPUOffloadConnector": ("v1/simple_kv_offload",),
    "HiSparseConnector": ("v1/hisparse",),
    "LMCacheConnectorV1": (f"{_V1}/lmcache_integration",),
}


def vllm_folder() -> Path | None:
    """The installed vLLM's package folder, found without importing it; None where vLLM is not installed."""
    try:
        spec = importlib.util.find_spec("vllm")
    except ImportError:  # an environment that refuses vLLM measures only third-party connectors
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def module_file(module: str) -> Path | None:
    """The source file of a dotted module name (a package's ``__init__.py``), found on disk without importing
    the module or its parent packages (``find_spec`` of a dotted name would import them)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        origin = Path(spec.origin) if spec.origin else None
        return origin.resolve() if origin is not None and origin.is_file() else None
    for location in spec.submodule_search_locations or ():
        base = Path(location).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


def _package_of(file: Path) -> Path | None:
    """The folder a module file makes up with its siblings: a package's own folder (its ``__init__.py``, or a
    module in a sub-package); None for a top-level module, whose folder is everyone's (site-packages)."""
    return file.parent if (file.parent / "__init__.py").is_file() else None


class Scope:
    """The files a run measures and each connector's own, for the installed vLLM and the connectors asked for.

    ``third_party``: name -> module of each ``package.module:Class`` connector of the run.
    """

    def __init__(self, third_party: dict[str, str] | None = None) -> None:
        self.vllm = vllm_folder()
        self.third_party = dict(third_party or {})
        self.registry = self._registry()

    def _registry(self) -> dict[str, str]:
        """name -> module of every connector the installed vLLM registers (none where it cannot be read)."""
        try:
            factory = installed_factory_file()
            if factory is None:
                return {}
            return {name: module for name, (module, _) in parse_registrations(factory.read_text()).items()}
        except (FactorySourceError, OSError, ImportError):
            return {}

    def measured(self) -> list[Path]:
        """Folders and files whose code is measured."""
        found: list[Path] = []
        if self.vllm is not None:
            folders = [*MEASURED_IN_VLLM, *(f for extra in EXTRA_OWN.values() for f in extra
                                            if not any(f.startswith(m + "/") for m in MEASURED_IN_VLLM))]
            found += [self.vllm / f for f in dict.fromkeys(folders) if (self.vllm / f).is_dir()]
        for module in self.third_party.values():
            file = module_file(module)
            if file is not None:
                found.append(_package_of(file) or file)
        return found

    def include_patterns(self) -> list[str]:
        """``measured`` as coverage.py's ``include`` globs."""
        return [f"{p}/**/*.py" if p.is_dir() else str(p) for p in self.measured()]

    def _own_roots(self, name: str) -> list[Path]:
        """The folders and files that are ``name``'s own: its module, its package where the module has one of
        its own, and ``EXTRA_OWN``'s folders."""
        module = self.third_party.get(name) or self.registry.get(name)
        file = module_file(module) if module else None
        if file is None:
            return []
        roots = [file]
        package = _package_of(file)
        if package is not None and (name in self.third_party or (package not in self._shared_folders() and
                                                                 self._is_below_vllm_v1(package))):
            roots = [package]
        if self.vllm is not None:
            roots += [self.vllm / f for f in EXTRA_OWN.get(name, ()) if (self.vllm / f).is_dir()]
        return roots

    def _shared_folders(self) -> set[Path]:
        """Folders that hold the modules of several registered connectors (``kv_connector/v1``): none of them is
        one connector's own."""
        files = {f for f in map(module_file, set(self.registry.values())) if f is not None and f.name != "__init__.py"}
        parents = Counter(f.parent for f in files)
        return {folder for folder, count in parents.items() if count > 1}

    def _is_below_vllm_v1(self, folder: Path) -> bool:
        """Whether ``folder`` is a package inside vLLM's ``kv_connector/v1`` (not that shared folder itself)."""
        return self.vllm is not None and folder.is_relative_to(self.vllm / _V1) and folder != self.vllm / _V1

    def own(self, name: str, files: Iterable[Path]) -> set[Path]:
        """Which of ``files`` are ``name``'s own (``_own_roots``), minus those under a deeper folder that is
        another connector's own (MooncakeStoreConnector's ``mooncake/store/`` inside ``mooncake/``)."""
        roots = self._own_roots(name)
        others = [r for other in {*self.registry, *self.third_party} - {name}
                  for r in self._own_roots(other) if r.is_dir()]

        def mine(file: Path) -> bool:
            root = next((r for r in roots if file == r or (r.is_dir() and file.is_relative_to(r))), None)
            if root is None:
                return False
            return not any(o != root and o.is_relative_to(root) and file.is_relative_to(o) for o in others)

        return {file for file in files if mine(file)}

    def own_files(self, name: str) -> set[Path]:
        """Every source file that is ``name``'s own, whether or not any test reached it."""
        files = [p for root in self._own_roots(name)
                 for p in (sorted(root.rglob("*.py")) if root.is_dir() else [root])]
        return self.own(name, files)
