"""The lint's rules, as data: what each finding means and the fix to make.

The rules come from bugs vLLM actually shipped: a load path
that hard-coded ``.cuda()`` (vLLM #42924), the same path hard-coding ``"cuda"``
again and breaking XPU (vLLM PR #51806), CUDA-only stream APIs called on every
platform, and MLA detected through one backend's metadata class.  A rule is
changed here, in one row; the checker only knows how to find each pattern.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]

# Most severe first; only errors fail a run (exit status 1, a failed conformance test).
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")


@dataclass(frozen=True)
class Rule:
    """One kind of finding.  ``message`` may name the offending code through ``{detail}``."""

    id: str
    severity: Severity
    name: str
    message: str
    fix: str


RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule("KVC000", "error", "unparseable",
             "cannot check this file: {detail}",
             "make the file valid Python for the interpreter that runs vLLM"),
        Rule("KVC001", "error", "cuda-method",
             "`{detail}` moves the tensor to the default CUDA device; it raises on CPU and XPU builds",
             "`.to(dst.device)`: follow the destination tensor's device"),
        Rule("KVC002", "error", "cuda-torch-device",
             "`{detail}` hard-codes the CUDA device",
             "take the device from the destination tensor (`kv_cache_layer.device`), "
             "or `torch.device(current_platform.device_type, index)`"),
        Rule("KVC003", "error", "cuda-device-literal",
             "{detail} hard-codes CUDA",
             "`.to(kv_cache_layer.device)` / `device=kv_cache_layer.device`: follow the destination tensor"),
        Rule("KVC004", "error", "torch-cuda-call",
             "`{detail}()` outside a platform guard raises on CPU builds and does not drive XPU",
             "the `torch.accelerator` or vLLM `current_platform` equivalent, "
             "or guard the call with `current_platform.is_cuda_alike()`"),
        Rule("KVC005", "warning", "torch-cuda-silent-call",
             "`{detail}()` outside a platform guard silently does nothing off CUDA, so XPU loses its effect",
             "the `torch.accelerator` or vLLM `current_platform` equivalent, "
             "or guard the call with `current_platform.is_cuda_alike()`"),
        Rule("KVC006", "warning", "mla-by-metadata-class",
             "MLA detected by the metadata class `{detail}`; other MLA backends use other classes",
             "ask the backend or the layer's kv_cache_spec (`use_mla`) instead of the metadata's type"),
        Rule("KVC008", "error", "accelerator-device-index",
             "`{detail}()` outside a platform guard raises on a CPU build "
             "(\"Cannot access accelerator device when none is available\")",
             "take the index from the destination tensor (`kv_cache_layer.device.index`), "
             "or guard the call with `current_platform.is_cuda_alike()` (or an XPU/accelerator check)"),
        Rule("KVC007", "info", "nonblocking-to-host",
             "`{detail}` returns before the copy lands; reading the host tensor needs a sync first",
             "synchronize the source stream (or wait on an event) before reading, or copy blocking"),
    )
}

# torch.cuda functions that are safe on every build: they are how code asks
# whether CUDA is there, so they are never findings (torch 2.13, CPU build).
TORCH_CUDA_PROBES = frozenset({"is_available", "device_count", "is_initialized"})

# torch.cuda functions that do not raise on a CPU build but silently do nothing
# there (measured on torch 2.13+cpu): on XPU their intended effect is lost (KVC005).
# Every other torch.cuda call raises without CUDA (KVC004): Stream, Event,
# current_stream, stream(s), synchronize, set_device, current_device, MemPool, ...
TORCH_CUDA_SILENT = frozenset({
    "empty_cache", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
})

# torch.accelerator's device-index calls: they raise on a CPU-only build, where no accelerator
# exists (measured on torch 2.13+cpu), e.g. MooncakeConnector's current_device_index() (KVC008).
TORCH_ACCELERATOR_DEVICE_INDEX = frozenset({
    "current_device_index", "current_device_idx", "set_device_index", "set_device_idx", "device_index",
})

# A CUDA device string: "cuda", "cuda:0", or the static start of f"cuda:{i}" / "cuda:" + str(i).
CUDA_DEVICE_STRING = re.compile(r"cuda(:\d*)?")
HOST_DEVICE_STRING = re.compile(r"cpu")

# Metadata classes whose isinstance() check means "this is MLA" (MLACommonMetadata, FlashMLAMetadata, ...).
MLA_METADATA_CLASS = re.compile(r"\w*MLA\w*Metadata")
