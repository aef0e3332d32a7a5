"""Ask the installed vLLM what it says about each backend in the platform table.

The table in each platform module is the fallback; when vLLM is importable this
reports, per backend, whether vLLM's ``AttentionBackendEnum`` has the member,
whether its class imports here, and whether it refuses KV connectors. vLLM is
imported only when this function is called.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class BackendVerdict:
    name: str
    confirmed: bool | None  # None: vLLM is not importable, the table alone speaks
    detail: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def confirm(backend: str) -> BackendVerdict:
    if not vllm_available():
        return BackendVerdict(backend, None, "vLLM is not installed; from kvconform's table")
    try:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum
    except Exception as exc:
        return BackendVerdict(backend, None, f"vLLM's backend registry did not import: {exc}")
    if backend not in AttentionBackendEnum.__members__:
        return BackendVerdict(backend, False, "vLLM's AttentionBackendEnum has no such member")
    try:
        cls = AttentionBackendEnum[backend].get_class()
    except Exception as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return BackendVerdict(backend, False, f"its class does not import here: {type(exc).__name__}: {first_line}")
    if not cls.supports_kv_connector():
        return BackendVerdict(backend, False, f"{cls.__name__}.supports_kv_connector() is False")
    return BackendVerdict(backend, True, f"{cls.__module__}.{cls.__name__} imports and supports KV connectors")
