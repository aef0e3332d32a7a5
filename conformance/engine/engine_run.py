"""One fresh vLLM engine, the tiny dummy model, one connector: run prompts, print JSON.

Run as ``python -m kvconform.conformance.engine.engine_run MODEL_DIR TRANSFER_JSON [ENGINE_JSON]`` (the
``KVTransferConfig`` fields as JSON; ENGINE_JSON: ``dtype``, ``block_size`` and
``attention_backend``, which the engine tier picks per platform and backend). Each
invocation is a new process, hence a truly fresh engine: the second run can only
hit the cache through the connector's storage. The engine runs in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so a crash is this process's exit status.

With ``KVCONFORM_ENGINE_HELD=1`` the process imports vLLM, then reads a line from
standard input and builds its engine only if that line is ``go``: the engine tier
starts the second engine's process while the first engine runs, so its import (a
third of an engine test) does not wait for the first; the engine itself, and everything it reads from the connector's
storage, still comes after the first process has ended.
"""

from __future__ import annotations

import json
import os
import sys

from .model import MAX_MODEL_LEN
from .prompts import request_prompt

ENGINE_BLOCK_SIZE = 32  # vLLM's CPU attention kernels want a multiple of 32
PROMPT_LENGTHS = (77, 45)
CANNOT_RUN = "KVCONFORM-CANNOT-RUN "  # first word of the line that says why this vLLM build runs no engine here
CPU_WORKER_FIRST_KERNEL = "init_cpu_memory_env"  # the op vLLM's CPU worker calls first (cpu_worker.py)
HELD_ENV = "KVCONFORM_ENGINE_HELD"  # "1": wait for GO on standard input before building the engine
GO = "go"


def missing_cpu_kernels() -> str | None:
    """Why this vLLM build cannot start its CPU engine, or None: the CPU worker's first kernel, asked for.

    The plain ``vllm`` wheel is a CUDA build; with ``VLLM_TARGET_DEVICE=cpu`` it selects vLLM's
    CpuPlatform but ships no CPU kernels, so every engine dies in the CPU worker's start. The
    probe loads the platform's kernels as the worker does and looks the op up, so the engine
    tier skips for the cause itself, whatever the version number says.
    """
    import torch
    from vllm.platforms import current_platform

    if current_platform.device_type != "cpu":
        return None
    current_platform.import_kernels()
    try:
        getattr(torch.ops._C, CPU_WORKER_FIRST_KERNEL)
    except (AttributeError, RuntimeError) as exc:
        return f"this vLLM build has no CPU kernels ({exc}), so its CPU engine cannot start"
    return None


# What the engine runs with when the caller says nothing: the CPU build's float32 and 32-token blocks.
DEFAULT_ENGINE = {"dtype": "float32", "block_size": ENGINE_BLOCK_SIZE, "attention_backend": None}


def main(model_dir: str, transfer_json: str, engine_json: str = "{}") -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    why = missing_cpu_kernels()
    if why:
        print(CANNOT_RUN + why)
        return 0
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    if os.environ.get(HELD_ENV) == "1" and sys.stdin.readline().strip() != GO:
        return 0  # the first engine failed: this one is not wanted
    engine = {**DEFAULT_ENGINE, **json.loads(engine_json)}
    llm = LLM(
        model=model_dir, skip_tokenizer_init=True, load_format="dummy", dtype=engine["dtype"], seed=0,
        max_model_len=MAX_MODEL_LEN, block_size=engine["block_size"], enforce_eager=True,
        attention_backend=engine["attention_backend"],
        kv_cache_memory_bytes=64 << 20, enable_prefix_caching=True,
        kv_transfer_config=KVTransferConfig(**json.loads(transfer_json)),
    )
    prompts = [TokensPrompt(prompt_token_ids=request_prompt(i, n)) for i, n in enumerate(PROMPT_LENGTHS)]
    outputs = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0, detokenize=False))
    print("KVCONFORM-RESULT " + json.dumps([
        {"tokens": list(o.outputs[0].token_ids), "cached": o.num_cached_tokens or 0, "prompt": len(o.prompt_token_ids)}
        for o in outputs
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
