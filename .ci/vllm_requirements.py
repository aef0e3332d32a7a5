"""Print the installed vLLM's requirements that a CPU run needs, one per line, for `pip install -r /dev/stdin`;
with ``--torch``, only the torch it requires.

Why: the plain `vllm` wheel pins a CUDA torch stack and GPU kernel packages (several GB). kvconform's
second environment installs vLLM with --no-deps on a torch the machine already has, then this list:
vLLM's own Requires-Dist (read from its installed metadata, so nothing is declared twice), with the
markers evaluated for this interpreter, minus the packages below that only serve GPUs or that would
replace the chosen torch.
"""

from __future__ import annotations

import importlib.metadata
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# name -> why it is left out
LEFT_OUT = {
    "torch": "kept as installed: the environment chooses its torch before vLLM",
    "torchaudio": "CUDA build beside the chosen torch breaks `import vllm.config`; the KV path needs none",
    "torchvision": "as torchaudio",
    "torchcodec": "as torchaudio",
    "pynvvideocodec": "NVIDIA video decoder",
    "flashinfer-python": "CUDA attention kernels",
    "apache-tvm-ffi": "FFI for the CUDA kernel packages",
    "tilelang": "CUDA kernel compiler",
    "nvidia-cudnn-frontend": "cuDNN",
    "nvtx": "NVIDIA profiler markers",
    "nvidia-cutlass-dsl": "CUDA kernel DSL",
    "quack-kernels": "CUDA kernels",
    "tokenspeed-mla": "CUDA MLA kernels",
    "humming-kernels": "CUDA kernels",
    "fastsafetensors": "GPU-direct weight loading",
    "instanttensor": "GPU weight loading",
}


def cpu_requirements(dist: str = "vllm") -> list[str]:
    """vLLM's unconditional requirements (no extras) for this interpreter, minus ``LEFT_OUT``."""
    kept = []
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) in LEFT_OUT:
            continue
        req.marker = None
        kept.append(str(req))
    return kept


def torch_requirement(dist: str = "vllm") -> str:
    """The torch vLLM requires (``torch==2.14.0``), for an environment that installs vLLM before its torch."""
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if canonicalize_name(req.name) == "torch" and (req.marker is None or req.marker.evaluate({"extra": ""})):
            req.marker = None
            return str(req)
    return "torch"


if __name__ == "__main__":
    args = sys.argv[1:]
    try:
        print(torch_requirement(*args[1:]) if args[:1] == ["--torch"] else "\n".join(cpu_requirements(*args)))
    except importlib.metadata.PackageNotFoundError as exc:
        sys.exit(f"vllm_requirements: {exc.name or exc} is not installed; install it with --no-deps first")
