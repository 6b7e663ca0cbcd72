"""A Llama job (model.arch llama) through the real fsdpd, fsdpd-worker and fsdpctl on loopback,
from the command line and from the Python client.

- fsdpctl submits a tiny llama spec (grouped-query attention, SwiGLU, untied head) at world 2 on
  CPU workers, over a learnable token file; it SUCCEEDS and its losses, read back through the
  Python client's watch, fall.
- `fsdpctl export JOB -o FOLDER` writes FOLDER/model.safetensors with exactly Hugging Face's
  LlamaForCausalLM parameter names and shapes (and the llama config in its metadata) and
  FOLDER/config.json with LlamaConfig's fields from the spec; so does `--step N`, from the
  checkpoint the job wrote halfway. `-o -` and `-o` an existing file are refused with the
  reason.
- The Python client submits the tied variant as a dict, waits for it and writes its folder with
  export_pretrained: no lm_head.weight, tie_word_embeddings true.
- A llama spec whose heads kv_heads does not divide is refused at submission, naming the field.
- Where FSDPD_TEST_TORCH_PYTHON names a Python with torch and transformers (CI has none), both
  folders are loaded with transformers and their logits compared with fsdpd's
  (bench/check_hf_export.py, bench/model_logits.cc).

usage: llama_job_test.py SOURCE_DIR BUILD_DIR   (the fsdpd package on PYTHONPATH)
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

from local_cluster import Sandbox, check

import fsdpd

MODEL = dict(arch="llama", vocab=64, dim=32, layers=2, heads=4, kv_heads=2, ffn_dim=48,
             rope_theta=10000.0, norm_eps=1.0e-5, tie_embeddings=False)
STEPS = 40


def spec_dict(name, tokens, every=0, **model):
    return {"name": name, "model": dict(MODEL, **model),
            "data": {"source": "tokens", "path": tokens, "token_bytes": 2, "seq_len": 16},
            "train": {"batch_size": 2, "steps": STEPS, "lr": 1.0e-2, "seed": 5},
            "parallel": {"world_size": 2, "device": "cpu", "param_dtype": "fp32"},
            "checkpoint": {"every_steps": every, "keep": 2}, "profile": {"steps": 0},
            "max_restarts": 0}


def hugging_face_shapes(model):
    """LlamaForCausalLM's state_dict names and shapes for `model` (a MODEL-like dict)."""
    dim, head_dim = model["dim"], model["dim"] // model["heads"]
    kv, ffn = model["kv_heads"] * head_dim, model["ffn_dim"]
    shapes = {"model.embed_tokens.weight": [model["vocab"], dim], "model.norm.weight": [dim]}
    if not model["tie_embeddings"]:
        shapes["lm_head.weight"] = [model["vocab"], dim]
    for layer in range(model["layers"]):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "input_layernorm.weight": [dim], p + "post_attention_layernorm.weight": [dim],
            p + "self_attn.q_proj.weight": [dim, dim], p + "self_attn.k_proj.weight": [kv, dim],
            p + "self_attn.v_proj.weight": [kv, dim], p + "self_attn.o_proj.weight": [dim, dim],
            p + "mlp.gate_proj.weight": [ffn, dim], p + "mlp.up_proj.weight": [ffn, dim],
            p + "mlp.down_proj.weight": [dim, ffn]})
    return shapes


def header(path):
    """{name: shape} and the metadata of a safetensors file."""
    with open(path, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        entries = json.loads(file.read(length))
    metadata = entries.pop("__metadata__", {})
    return {name: entry["shape"] for name, entry in entries.items()}, metadata


def check_folder(folder, model, seq_len):
    shapes, metadata = header(os.path.join(folder, "model.safetensors"))
    check(shapes == hugging_face_shapes(model),
          f"{folder}: names and shapes differ from LlamaForCausalLM's: "
          f"{sorted(set(shapes) ^ set(hugging_face_shapes(model)))}")
    check(metadata.get("format") == "pt" and metadata.get("architecture") == "fsdpd.Llama" and
          metadata.get("kv_heads") == str(model["kv_heads"]), f"{folder}: metadata {metadata}")
    with open(os.path.join(folder, "config.json")) as file:
        config = json.load(file)
    expected = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "vocab_size": model["vocab"], "hidden_size": model["dim"],
                "intermediate_size": model["ffn_dim"], "num_hidden_layers": model["layers"],
                "num_attention_heads": model["heads"], "num_key_value_heads": model["kv_heads"],
                "max_position_embeddings": seq_len, "rms_norm_eps": model["norm_eps"],
                "rope_theta": model["rope_theta"], "hidden_act": "silu",
                "tie_word_embeddings": model["tie_embeddings"], "attention_bias": False,
                "mlp_bias": False}
    wrong = {key: (config.get(key), value) for key, value in expected.items()
             if config.get(key) != value}
    check(not wrong, f"{folder}/config.json: (written, expected) {wrong}")


def losses_of(client, job):
    return [event.loss for event in client.watch(job) if isinstance(event, fsdpd.StepEvent)]


def main(source_dir, build_dir):
    sandbox = Sandbox(build_dir, "fsdpd-llama-")
    sandbox.use_ports()
    ok = False
    try:
        tokens = os.path.join(sandbox.dir, "tokens.bin")
        shutil.copy(os.path.join(source_dir, "tests", "golden", "llama_tiny", "tokens.bin"),
                    tokens)
        sandbox.start_cpu_cluster(2)
        client = fsdpd.Client(sandbox.address)

        # A bad llama spec is refused at submission, naming the field.
        bad = os.path.join(sandbox.dir, "bad.yaml")
        with open(bad, "w") as file:
            json.dump(spec_dict("bad", tokens, kv_heads=3), file)  # JSON is YAML
        result = sandbox.ctl("submit", bad)
        check(result.returncode != 0 and
              "model.kv_heads: model.heads must be divisible by model.kv_heads (got 4 and 3)"
              in result.stderr, f"bad spec: {result.returncode} {result.stderr!r}")

        # From the command line.
        spec = os.path.join(sandbox.dir, "llama.yaml")
        with open(spec, "w") as file:
            json.dump(spec_dict("llama-cli", tokens, every=STEPS // 2), file)
        result = sandbox.ctl("submit", spec)
        check(result.returncode == 0, f"submit: {result.stderr}")
        job = re.search(r"\bjob-\d+\b", result.stdout).group(0)
        final = client.wait(job)
        check(final.state == fsdpd.JobState.SUCCEEDED, f"{job}: {final}")
        losses = losses_of(client, job)
        check(len(losses) == STEPS and losses[-1] < losses[0] - 0.5,
              f"the losses must fall: {losses}")
        print(f"{job} (CLI, untied, world 2): loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        folder = os.path.join(sandbox.dir, "llama-cli")
        result = sandbox.ctl("export", job, "-o", folder, timeout=120)
        check(result.returncode == 0, f"export: {result.stderr}")
        check("config.json" in result.stdout and "from_pretrained" in result.stdout,
              f"export's report: {result.stdout!r}")
        check_folder(folder, MODEL, 16)
        print(f"fsdpctl export {job} -o FOLDER: config.json and model.safetensors with "
              f"Hugging Face's {len(hugging_face_shapes(MODEL))} names")
        # A checkpoint's export is consolidated from the ranks' files by an idle worker
        # (worker/checkpoint/consolidate.cc): the same folder, from the llama layout.
        halfway = os.path.join(sandbox.dir, "llama-halfway")
        result = sandbox.ctl("export", job, "--step", str(STEPS // 2), "-o", halfway, timeout=120)
        check(result.returncode == 0, f"export --step: {result.stderr}")
        check_folder(halfway, MODEL, 16)
        check(header(os.path.join(halfway, "model.safetensors"))[1].get("step") == str(STEPS // 2),
              "the halfway export's step")
        print(f"fsdpctl export {job} --step {STEPS // 2}: the consolidated checkpoint, same names")
        result = sandbox.ctl("export", job, "-o", "-")
        check(result.returncode != 0 and "a llama job exports a folder" in result.stderr,
              f"-o -: {result.returncode} {result.stderr!r}")
        result = sandbox.ctl("export", job, "-o", spec)
        check(result.returncode != 0 and "exists and is not a folder" in result.stderr,
              f"-o FILE: {result.returncode} {result.stderr!r}")

        # From Python: the tied variant.
        tied_model = dict(MODEL, tie_embeddings=True)
        submitted = client.submit(spec_dict("llama-python", tokens, tie_embeddings=True))
        final = client.wait(submitted.id)
        check(final.state == fsdpd.JobState.SUCCEEDED, f"{submitted.id}: {final}")
        check(final.spec.model.arch == "llama" and final.spec.model.tie_embeddings,
              f"stored spec: {final.spec.model}")
        losses = losses_of(client, submitted.id)
        check(losses[-1] < losses[0] - 0.5, f"the losses must fall: {losses}")
        print(f"{submitted.id} (Python, tied, world 2): loss {losses[0]:.4f} -> {losses[-1]:.4f}")
        tied_folder = os.path.join(sandbox.dir, "llama-python")
        check(client.export_pretrained(submitted.id, tied_folder) == tied_folder, "returned path")
        check_folder(tied_folder, tied_model, 16)
        print("Client.export_pretrained: no lm_head.weight, tie_word_embeddings true")

        torch_python = os.environ.get("FSDPD_TEST_TORCH_PYTHON")
        if torch_python:
            for exported in (folder, tied_folder):
                result = subprocess.run(
                    [torch_python, os.path.join(source_dir, "bench", "check_hf_export.py"),
                     exported, "--logits-tool", os.path.join(build_dir, "bench", "model_logits")],
                    capture_output=True, text=True, timeout=300)
                print(result.stdout)
                check(result.returncode == 0, f"transformers against fsdpd: {result.stderr}")
        else:
            print("FSDPD_TEST_TORCH_PYTHON unset: the folders were not loaded with transformers")
        ok = True
    finally:
        sandbox.finish(ok)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
