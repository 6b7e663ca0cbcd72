#!/usr/bin/env python3
"""fsdpd export (safetensors, fsdpd.MiniLLM) -> GGUF for llama.cpp, as its `gpt2` architecture.

Made to run llama.cpp on the same shapes as fsdpd-edge (bench/llama_cpp/edge_vs_llama.sh):
throughput only. The logits do NOT match fsdpd's: the two models compute different functions.

The shapes match op for op: the same width, layers, heads, vocabulary, a fused q/k/v projection
(in_proj, 3·dim rows in q, k, v order, split into heads the same way) with its bias, the output
projection with its bias, a non-gated FFN of two matrices (dim -> ffn_mult·dim -> dim), causal
attention, an untied head. llama.cpp's `gpt2` differs from fsdpd's MiniLLM (docs/edge.md, "The
model") in:

  - norms: LayerNorm (mean subtracted, weight and bias) where fsdpd has RMSNorm (weight only).
    The RMSNorm weight becomes the LayerNorm weight, the bias is zero, and the epsilon is
    fsdpd's norm_eps.
  - activation: GELU (ggml's tanh approximation) where fsdpd has SiLU.
  - positions: gpt2 adds a learned position table to the embeddings; it is written as zeros
    (`--context` rows), so the model is position-free (NoPE) like fsdpd's. The add stays (one
    elementwise add of [tokens, dim] per forward).
  - FFN biases: gpt2 requires them on both FFN matrices; fsdpd has none, so they are zero (a bias
    add after each FFN matrix).
  - final norm: gpt2 always has one (LayerNorm before the head). fsdpd's `final_norm` weight is
    used when the export has it, ones otherwise.
  - attention: always causal in llama.cpp; an export with causal=false (fsdpd's unmasked
    attention) is converted with a warning, and llama.cpp runs it masked.
  - tokenizer: a byte-level BPE vocabulary without merges (the `gpt2` tokenizer model): token
    id b < 256 is the single byte b, so a text tokenizes to its bytes as fsdpd's `text` source
    and `fsdpd-edge eval --text` do (llama-perplexity is meaningful for a byte-level model).
    Ids from 256 up are placeholder tokens that no text produces. No BOS is added.

Weights: 2-D matrices (embedding, position table, projections, FFN, head) in fp16 (or fp32
with --outtype f32), norms and biases in fp32, as llama.cpp's own converters write them.
Quantize the fp16 file with llama-quantize (e.g. Q8_0) for the quantized runs.

    python3 bench/llama_cpp/export_to_gguf.py model.safetensors model-f16.gguf [--outtype f16]

Needs numpy and the `gguf` package (pip install gguf); reads safetensors itself.
"""
import argparse
import json
import struct
import sys

import numpy as np

MINILLM = "fsdpd.MiniLLM"
# safetensors dtype names -> numpy
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": None}
BYTE_TOKENS = 256


def read_safetensors(path):
    """(metadata dict, {name: numpy array view}) of a safetensors file, memory-mapped."""
    with open(path, "rb") as f:
        (header_size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_size))
    metadata = header.pop("__metadata__", {}) or {}
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    tensors = {}
    for name, info in header.items():
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, not F32/F16/F64")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * np.dtype(dtype).itemsize or end > data.size:
            raise ValueError(f"{path}: tensor {name} has {end - begin} bytes for shape {shape}")
        tensors[name] = data[begin:end].view(dtype).reshape(shape)
    return metadata, tensors


def parse_config(metadata, path):
    """fsdpd's model section (formats/model_metadata.h) from the export's __metadata__."""
    architecture = metadata.get("architecture")
    if architecture != MINILLM:
        raise ValueError(f"{path}: __metadata__ 'architecture' is {architecture!r}, "
                         f"not {MINILLM!r} (only fsdpd's MiniLLM converts)")
    config = {}
    for key in ("vocab", "dim", "layers", "heads", "ffn_mult"):
        if key not in metadata:
            raise ValueError(f"{path}: __metadata__ has no '{key}'")
        config[key] = int(metadata[key])
    for key in ("causal", "final_norm"):
        config[key] = metadata.get(key) == "true"
    config["norm_eps"] = float(metadata["norm_eps"])
    if config["dim"] % config["heads"] != 0:
        raise ValueError(f"{path}: dim {config['dim']} is not a multiple of heads "
                         f"{config['heads']}")
    return config


def expected_shapes(c):
    """Every tensor of the export, by name, as formats/model_metadata.cc lists them."""
    d, ffn = c["dim"], c["ffn_mult"] * c["dim"]
    shapes = {}
    for i in range(c["layers"]):
        p = f"layers.{i}."
        shapes.update({
            p + "norm1.weight": (d,), p + "attn.in_proj_weight": (3 * d, d),
            p + "attn.in_proj_bias": (3 * d,), p + "attn.out_proj.weight": (d, d),
            p + "attn.out_proj.bias": (d,), p + "norm2.weight": (d,),
            p + "ffn.0.weight": (ffn, d), p + "ffn.2.weight": (d, ffn)})
    shapes["embed.weight"] = (c["vocab"], d)
    shapes["head.weight"] = (c["vocab"], d)
    if c["final_norm"]:
        shapes["norm.weight"] = (d,)
    return shapes


def gguf_tensors(c, tensors, context, matrix_dtype):
    """(gguf name, numpy array) in the order llama.cpp's gpt2 loads them; numpy shapes are
    ggml's reversed (ggml ne = [cols, rows])."""
    d, ffn = c["dim"], c["ffn_mult"] * c["dim"]

    def matrix(a):
        return np.ascontiguousarray(a, dtype=matrix_dtype)

    def vector(a):
        return np.ascontiguousarray(a, dtype=np.float32)

    yield "token_embd.weight", matrix(tensors["embed.weight"])
    yield "position_embd.weight", np.zeros((context, d), dtype=matrix_dtype)
    final = tensors["norm.weight"] if c["final_norm"] else np.ones(d, dtype=np.float32)
    yield "output_norm.weight", vector(final)
    yield "output_norm.bias", np.zeros(d, dtype=np.float32)
    yield "output.weight", matrix(tensors["head.weight"])
    for i in range(c["layers"]):
        p, b = f"layers.{i}.", f"blk.{i}."
        yield b + "attn_norm.weight", vector(tensors[p + "norm1.weight"])
        yield b + "attn_norm.bias", np.zeros(d, dtype=np.float32)
        yield b + "attn_qkv.weight", matrix(tensors[p + "attn.in_proj_weight"])
        yield b + "attn_qkv.bias", vector(tensors[p + "attn.in_proj_bias"])
        yield b + "attn_output.weight", matrix(tensors[p + "attn.out_proj.weight"])
        yield b + "attn_output.bias", vector(tensors[p + "attn.out_proj.bias"])
        yield b + "ffn_norm.weight", vector(tensors[p + "norm2.weight"])
        yield b + "ffn_norm.bias", np.zeros(d, dtype=np.float32)
        yield b + "ffn_up.weight", matrix(tensors[p + "ffn.0.weight"])
        yield b + "ffn_up.bias", np.zeros(ffn, dtype=np.float32)
        yield b + "ffn_down.weight", matrix(tensors[p + "ffn.2.weight"])
        yield b + "ffn_down.bias", np.zeros(d, dtype=np.float32)


def byte_vocabulary(vocab):
    """Token strings of a byte-level BPE vocabulary: id b < 256 is byte b in GPT-2's
    byte-to-unicode alphabet (what llama.cpp's BPE tokenizer looks bytes up by), the rest
    placeholders."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    alphabet, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            alphabet[byte] = chr(byte)
        else:
            alphabet[byte] = chr(256 + extra)
            extra += 1
    tokens = [alphabet[b] for b in range(min(vocab, BYTE_TOKENS))]
    tokens += [f"<fsdpd_token_{i}>" for i in range(BYTE_TOKENS, vocab)]
    return tokens


def convert(source, destination, outtype="f16", context=2048, quiet=False):
    import gguf  # imported here so that --help works without it

    metadata, tensors = read_safetensors(source)
    c = parse_config(metadata, source)
    expected = expected_shapes(c)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(f"{source}: tensors missing {missing[:4]}, unexpected {extra[:4]}")
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"{source}: {name} has shape {tuple(tensors[name].shape)}, "
                             f"expected {shape}")
    if c["vocab"] < BYTE_TOKENS:
        raise ValueError(f"{source}: vocab {c['vocab']} < 256 (the byte tokens)")
    if not c["causal"]:
        print(f"warning: {source} is not causal; llama.cpp's gpt2 always masks (same shapes, "
              "half the attention scores)", file=sys.stderr)

    matrix_dtype = {"f16": np.float16, "f32": np.float32}[outtype]
    writer = gguf.GGUFWriter(destination, "gpt2")
    writer.add_name("fsdpd MiniLLM (as gpt2)")
    writer.add_description(
        f"converted from an fsdpd export by bench/llama_cpp/export_to_gguf.py: dim {c['dim']}, "
        f"layers {c['layers']}, heads {c['heads']}, vocab {c['vocab']}, ffn_mult "
        f"{c['ffn_mult']}; LayerNorm and GELU in place of RMSNorm and SiLU, zero positions")
    writer.add_context_length(context)
    writer.add_embedding_length(c["dim"])
    writer.add_feed_forward_length(c["ffn_mult"] * c["dim"])
    writer.add_block_count(c["layers"])
    writer.add_head_count(c["heads"])
    writer.add_head_count_kv(c["heads"])
    writer.add_layer_norm_eps(c["norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if outtype == "f16"
                         else gguf.LlamaFileType.ALL_F32)
    writer.add_uint32("fsdpd.ffn_mult", c["ffn_mult"])
    writer.add_bool("fsdpd.causal", c["causal"])
    writer.add_bool("fsdpd.final_norm", c["final_norm"])

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(byte_vocabulary(c["vocab"]))
    writer.add_token_types([gguf.TokenType.NORMAL] * c["vocab"])
    # llama.cpp's BPE loader requires a merges list; this one pair of multi-character symbols
    # never occurs (a text starts as one symbol a byte), so every byte stays one token.
    writer.add_token_merges(["fsdpd none"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)

    count = 0
    for name, array in gguf_tensors(c, tensors, context, matrix_dtype):
        writer.add_tensor(name, array)
        count += array.size
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if not quiet:
        print(f"{destination}: gpt2, dim {c['dim']}, layers {c['layers']}, heads {c['heads']}, "
              f"vocab {c['vocab']}, ffn {c['ffn_mult'] * c['dim']}, {count / 1e6:.1f} M values "
              f"({outtype} matrices), context {context}")
    return c


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="fsdpd export (.safetensors)")
    parser.add_argument("destination", help="GGUF file to write")
    parser.add_argument("--outtype", choices=["f16", "f32"], default="f16",
                        help="type of the 2-D weights (norms and biases are always f32)")
    parser.add_argument("--context", type=int, default=2048,
                        help="rows of the (zero) position table: the longest context llama.cpp "
                             "runs (n_ctx_train)")
    args = parser.parse_args()
    try:
        convert(args.source, args.destination, args.outtype, args.context)
    except (ValueError, OSError) as error:
        print(f"export_to_gguf: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
