"""Loads a llama job's exported folder with transformers and compares its logits with fsdpd's.

`fsdpctl export JOB -o FOLDER` (or fsdpd.Client.export_pretrained) writes FOLDER/config.json
and FOLDER/model.safetensors. This script loads the folder as it is with
transformers.AutoModelForCausalLM.from_pretrained (fp32, eager attention; no missing or
unexpected keys allowed), draws a batch of token ids, computes fsdpd's logits for it from the
same model.safetensors with the model_logits tool (bench/model_logits.cc: the engine's model on
the CPU backend in fp32), and prints the largest differences. Exit status 0 when every logit
agrees within atol + rtol·|logit|, 1 otherwise.

Run where torch and transformers are installed (tests/golden/make_llama_fixtures.py says how to
make such a venv):
    /work/venv-torch/bin/python bench/check_hf_export.py FOLDER --logits-tool build/bench/model_logits
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def compare(folder, logits_tool, batch=2, seq=None, seed=0, atol=1e-4, rtol=1e-4):
    """Returns the figures of one comparison as a dict (and raises on a load problem)."""
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    with open(os.path.join(folder, "config.json")) as file:
        config = json.load(file)
    seq = seq or min(int(config["max_position_embeddings"]), 64)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    problems = {key: value for key, value in info.items() if value}
    if problems:
        raise AssertionError(f"transformers did not load {folder} as it is: {problems}")
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, int(config["vocab_size"]), (batch, seq), generator=generator)
    with torch.no_grad():
        expected = model(input_ids=inputs).logits.reshape(batch * seq, -1).float()
    with tempfile.TemporaryDirectory() as work:
        batch_path = os.path.join(work, "batch.safetensors")
        logits_path = os.path.join(work, "logits.safetensors")
        save_file({"inputs": inputs.float()}, batch_path)
        subprocess.run([logits_tool, "--model", os.path.join(folder, "model.safetensors"),
                        "--batch", batch_path, "-o", logits_path], check=True,
                       stdout=subprocess.DEVNULL)
        actual = load_file(logits_path)["logits"]
    difference = (actual - expected).abs()
    excess = difference - (atol + rtol * expected.abs())
    return {
        "folder": folder,
        "model": type(model).__name__,
        "transformers": transformers.__version__,
        "batch": f"{batch}x{seq}",
        "largest_logit": expected.abs().max().item(),
        "max_abs_difference": difference.max().item(),
        "mean_abs_difference": difference.mean().item(),
        "same_argmax": (actual.argmax(-1) == expected.argmax(-1)).float().mean().item(),
        "atol": atol,
        "rtol": rtol,
        "within": bool((excess <= 0).all().item()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--logits-tool", default=os.path.join("build", "bench", "model_logits"))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--rtol", type=float, default=1e-4)
    args = parser.parse_args()
    figures = compare(args.folder, args.logits_tool, args.batch, args.seq, args.seed, args.atol,
                      args.rtol)
    print(json.dumps(figures, indent=2))
    sys.exit(0 if figures["within"] else 1)


if __name__ == "__main__":
    main()
