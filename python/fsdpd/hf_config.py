"""config.json for a llama job's weights: Hugging Face's LlamaConfig from the job's spec.

The same fields fsdpctl export writes (proto/spec/hf_config.cc), so that a folder holding it and
the exported model.safetensors (Hugging Face's names) loads with transformers'
``LlamaForCausalLM.from_pretrained(folder)``.
"""
from __future__ import annotations

from typing import Any

from fsdpd.v1 import spec_pb2

#: The value of model.norm_eps 0: fp32's machine epsilon, as the engine runs it.
_FLOAT32_EPSILON = 1.1920928955078125e-07


def llama_hf_config(spec: spec_pb2.JobSpec) -> dict[str, Any]:
    """LlamaConfig's fields for a llama job's spec (its defaults filled in, as GetJob returns
    it): kv_heads 0 is heads, ffn_dim 0 is ffn_mult · dim, max_position_embeddings the job's
    data.seq_len, and the rotary base both as rope_theta (transformers 4) and rope_parameters
    (transformers 5)."""
    model = spec.model
    if model.arch != "llama":
        raise ValueError(f"the job's model.arch is {model.arch or 'minillm'!r}, not llama")
    theta = float(model.rope_theta)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": model.vocab,
        "hidden_size": model.dim,
        "intermediate_size": model.ffn_dim or model.ffn_mult * model.dim,
        "num_hidden_layers": model.layers,
        "num_attention_heads": model.heads,
        "num_key_value_heads": model.kv_heads or model.heads,
        "head_dim": model.dim // model.heads,
        "hidden_act": "silu",
        "max_position_embeddings": spec.data.seq_len,
        "rms_norm_eps": model.norm_eps or _FLOAT32_EPSILON,
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "tie_word_embeddings": model.tie_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
        "use_cache": True,
    }
