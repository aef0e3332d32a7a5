"""What the harness asks of an attention backend: its class, layout and metadata type.

Connectors see per-layer attention metadata only through its type (ExampleConnector
detects MLA with ``isinstance(..., MLACommonMetadata)``), so each layer gets an
instance of the backend's own metadata class, found from the backend's metadata
builder. Building real metadata needs the backend's kernels, which a layout-only
run on another platform lacks; no connector in vLLM 0.32/0.33 reads its fields.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

from ..vllm_install import api as vllm_api

# The MLA backend a platform's MLA layers use, as data (non-MLA backends come from platforms/).
MLA_BACKENDS: dict[str, str] = {"cpu": "CPU_MLA", "cuda": "TRITON_MLA", "rocm": "TRITON_MLA", "xpu": "TRITON_MLA"}


@cache
def backend_class(name: str) -> type[Any]:  # an AttentionBackend subclass
    backend: type[Any] = vllm_api.find("AttentionBackendEnum")[name].get_class()
    return backend


def metadata_type_of_builder(builder_cls: type) -> type[Any]:
    for klass in builder_cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            for arg in typing.get_args(base):
                if isinstance(arg, typing.TypeVar):
                    arg = arg.__bound__
                if isinstance(arg, type):
                    return arg
    raise TypeError(f"{builder_cls.__name__} does not name its metadata class")


@cache
def metadata_class(backend: str) -> type[Any]:
    return metadata_type_of_builder(backend_class(backend).get_builder_cls())


def metadata_instance(backend: str) -> object:
    """An instance of the backend's metadata class (fields unset: see the module docstring)."""
    cls = metadata_class(backend)
    return cls.__new__(cls)  # type: ignore[call-overload]  # mypy reads a type[Any]'s __new__ as type.__new__
