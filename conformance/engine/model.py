"""The tiny model: a ``config.json`` alone, enough for vLLM's ``ModelConfig``.

Head size 32 because vLLM's CPU attention kernels accept 32, 64, 80, ...; two
layers so per-layer mistakes show; two KV heads so head-order mistakes show.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TINY_LLAMA: dict[str, Any] = {  # config.json, as JSON
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}

NUM_LAYERS: int = TINY_LLAMA["num_hidden_layers"]
NUM_KV_HEADS: int = TINY_LLAMA["num_key_value_heads"]
HEAD_SIZE: int = TINY_LLAMA["hidden_size"] // TINY_LLAMA["num_attention_heads"]
MAX_MODEL_LEN = 512
# DeepSeek-style MLA latent: kv_lora_rank 64 + rope dim 32, one "head".
MLA_HEAD_SIZE = 96
# The tiny model's fields that make vLLM's ModelConfig an MLA model (use_mla), for connectors that ask the config
# rather than the cache spec (NIXL: one read per replicated latent); its latent is MLA_HEAD_SIZE wide, its layers and
# sizes the tiny Llama's.
TINY_MLA_CHANGES: dict[str, Any] = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "num_key_value_heads": TINY_LLAMA["num_attention_heads"],
    "kv_lora_rank": 64,
    "qk_rope_head_dim": MLA_HEAD_SIZE - 64,
    "q_lora_rank": None,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "moe_intermediate_size": 64,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": TINY_LLAMA["num_hidden_layers"],
}


def write_tiny_model(directory: Path, **changes: object) -> Path:
    """The tiny model's ``config.json`` in ``directory``; ``changes`` replace some of its fields."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({**TINY_LLAMA, **changes}, indent=2))
    return directory


def attention_layer_names(prefix: str = "model.layers", count: int = NUM_LAYERS) -> list[str]:
    """Layer names as vLLM's Llama registers them, so index extraction works."""
    return [f"{prefix}.{i}.self_attn.attn" for i in range(count)]
