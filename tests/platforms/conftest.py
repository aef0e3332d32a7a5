"""Fakes for torch's device probes, so detection of every platform is tested without its hardware."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

import pytest
import torch


class FakeDeviceModule:
    """Stands in for ``torch.cuda`` / ``torch.xpu``; counts calls that would create a context."""

    def __init__(self, count: int, name: str = "Fake Device"):
        self.count = count
        self.name = name
        self.context_created = False

    def device_count(self) -> int:
        return self.count

    def is_available(self) -> bool:
        return self.count > 0

    def get_device_name(self, index: int = 0) -> str:
        self.context_created = True
        return f"{self.name} #{index}"

    def current_device(self) -> int:
        self.context_created = True
        return 0


class _IpexFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, count: int, monkeypatch):
        self.count = count
        self.monkeypatch = monkeypatch

    def find_spec(self, name, path=None, target=None):
        if name == "intel_extension_for_pytorch":
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        self.monkeypatch.setattr(torch, "xpu", FakeDeviceModule(self.count, "IPEX XPU"), raising=False)


@pytest.fixture
def fake_torch(monkeypatch):
    """Configure what torch reports: ``fake_torch(cuda=2, hip=None, xpu=0, cuda_version="12.4")``."""

    def configure(cuda: int = 0, hip: str | None = None, xpu: int | None = 0, cuda_version: str | None = None,
                  ipex: str | None = None):
        cuda_module = FakeDeviceModule(cuda, "Fake GPU")
        monkeypatch.setattr(torch, "cuda", cuda_module)
        monkeypatch.setattr(torch.version, "hip", hip, raising=False)
        monkeypatch.setattr(torch.version, "cuda", cuda_version, raising=False)
        if xpu is None:
            monkeypatch.delattr(torch, "xpu", raising=False)
        else:
            monkeypatch.setattr(torch, "xpu", FakeDeviceModule(xpu, "Fake XPU"), raising=False)
        # intel_extension_for_pytorch: absent, importable (registers XPUs), or broken at import
        import importlib.util

        real_find_spec = importlib.util.find_spec
        monkeypatch.delitem(sys.modules, "intel_extension_for_pytorch", raising=False)
        found = None if ipex is None else object()  # what find_spec answers for IPEX

        def find_spec(name, *args):
            return found if name == "intel_extension_for_pytorch" else real_find_spec(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
        if ipex == "broken":
            monkeypatch.setitem(sys.modules, "intel_extension_for_pytorch", None)  # import raises ImportError
        elif ipex is not None:  # importing it registers torch.xpu, as IPEX does on older stacks
            monkeypatch.setattr(sys, "meta_path", [_IpexFinder(int(ipex), monkeypatch), *sys.meta_path])
        return cuda_module

    return configure
