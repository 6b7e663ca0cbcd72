"""Generates the PyTorch golden fixtures the Llama model is checked against.

Run where PyTorch and transformers are installed, e.g. a venv outside the repository:
    python3 -m venv /work/venv-torch && /work/venv-torch/bin/pip install torch transformers
    /work/venv-torch/bin/python tests/golden/make_llama_fixtures.py tests/golden

It writes two fixture folders, llama_tiny (untied head) and llama_tiny_tied (the head is the
embedding, and a non-default rope_theta), with the same files as make_fixtures.py's tiny:
init, batch, forward (logits and loss), grads, after_3_steps (three AdamW steps on the batch),
losses (those steps' losses and a 20-step trajectory over tokens.bin) and config.json. The model
is transformers' LlamaForCausalLM itself, built from its LlamaConfig with Hugging Face's own
initialisation, in fp32 on the CPU with deterministic algorithms and eager attention, so the
fixtures are exact references for the fp32 CPU engine. Its state_dict names are the engine's.
The loss is the mean cross-entropy of the logits against the given targets (no internal label
shift), as the engine computes it; the trajectory's data follows the `tokens` loader's window
rule, as in make_fixtures.py.
"""
import json
import os
import sys

import torch
import torch.nn as nn
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import write_safetensors  # noqa: E402  (the same minimal writer)

BASE = dict(arch="llama", vocab=64, dim=32, layers=2, heads=4, kv_heads=2, ffn_dim=48,
            rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=False, batch=2, seq=16,
            lr=1e-3, weight_decay=0.01, beta1=0.9, beta2=0.999, eps=1e-8,
            trajectory_steps=20, trajectory_lr=3e-3, num_tokens=4001, seed=1234)

FIXTURES = {
    "llama_tiny": BASE,
    "llama_tiny_tied": dict(BASE, tie_embeddings=True, rope_theta=500.0, seed=4321),
}


def llama_config(c):
    return transformers.LlamaConfig(
        vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["ffn_dim"],
        num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"], rms_norm_eps=c["norm_eps"],
        rope_theta=c["rope_theta"], tie_word_embeddings=c["tie_embeddings"],
        max_position_embeddings=c["seq"], attention_bias=False, mlp_bias=False,
        attn_implementation="eager")


def make_model(c):
    torch.manual_seed(c["seed"])
    model = transformers.LlamaForCausalLM(llama_config(c)).to(torch.float32)
    model.train()  # no dropout in Llama; train() only for the record
    return model


def parameters(model):
    """The trainable parameters by name: a tied head appears once, as the embedding."""
    return dict(model.named_parameters())


def loss_of(model, inputs, targets, vocab):
    logits = model(input_ids=inputs).logits
    return logits, nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))


def make(out_dir, c):
    os.makedirs(out_dir, exist_ok=True)
    model = make_model(c)
    write_safetensors(os.path.join(out_dir, "init.safetensors"),
                      {name: p.detach().clone() for name, p in parameters(model).items()})

    generator = torch.Generator().manual_seed(c["seed"] + 1)
    inputs = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=generator)
    targets = torch.randint(0, c["vocab"], (c["batch"], c["seq"]), generator=generator)
    write_safetensors(os.path.join(out_dir, "batch.safetensors"),
                      {"inputs": inputs.float(), "targets": targets.float()})

    logits, loss = loss_of(model, inputs, targets, c["vocab"])
    loss.backward()
    write_safetensors(os.path.join(out_dir, "forward.safetensors"),
                      {"logits": logits, "loss": loss.reshape(1)})
    write_safetensors(os.path.join(out_dir, "grads.safetensors"),
                      {name: p.grad for name, p in parameters(model).items()})

    # Three AdamW steps on the same batch, from the initial weights.
    model = make_model(c)
    optimizer = torch.optim.AdamW(model.parameters(), lr=c["lr"], betas=(c["beta1"], c["beta2"]),
                                  eps=c["eps"], weight_decay=c["weight_decay"])
    adamw_losses = []
    for _ in range(3):
        optimizer.zero_grad()
        _, loss = loss_of(model, inputs, targets, c["vocab"])
        loss.backward()
        optimizer.step()
        adamw_losses.append(loss.item())
    write_safetensors(os.path.join(out_dir, "after_3_steps.safetensors"),
                      {name: p for name, p in parameters(model).items()})

    # The loss trajectory over a noisy arithmetic sequence, as make_fixtures.py makes it.
    generator = torch.Generator().manual_seed(c["seed"] + 2)
    positions = torch.arange(c["num_tokens"])
    random_tokens = torch.randint(0, c["vocab"], (c["num_tokens"],), generator=generator)
    replace = torch.rand(c["num_tokens"], generator=generator) < 0.25
    tokens = torch.where(replace, random_tokens, (positions * 7) % c["vocab"]).to(torch.int64)
    tokens.numpy().astype("<u2").tofile(os.path.join(out_dir, "tokens.bin"))
    seq, batch = c["seq"], c["batch"]
    num_windows = (c["num_tokens"] - 1) // seq
    model = make_model(c)
    optimizer = torch.optim.AdamW(model.parameters(), lr=c["trajectory_lr"],
                                  betas=(c["beta1"], c["beta2"]), eps=c["eps"],
                                  weight_decay=c["weight_decay"])
    trajectory = []
    for step in range(c["trajectory_steps"]):
        windows = [(step * batch + i) % num_windows for i in range(batch)]
        x = torch.stack([tokens[k * seq:k * seq + seq] for k in windows])
        y = torch.stack([tokens[k * seq + 1:k * seq + seq + 1] for k in windows])
        optimizer.zero_grad()
        _, loss = loss_of(model, x, y, c["vocab"])
        loss.backward()
        optimizer.step()
        trajectory.append(loss.item())
    write_safetensors(os.path.join(out_dir, "losses.safetensors"),
                      {"adamw_losses": torch.tensor(adamw_losses),
                       "trajectory_losses": torch.tensor(trajectory)})
    with open(os.path.join(out_dir, "config.json"), "w") as out:
        json.dump(c, out, indent=2)
    print(f"{out_dir}: torch {torch.__version__}, transformers {transformers.__version__}: "
          f"AdamW losses {[round(x, 6) for x in adamw_losses]}, "
          f"trajectory {trajectory[0]:.4f} -> {trajectory[-1]:.4f}")


def main(root):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name, c in FIXTURES.items():
        make(os.path.join(root, name), c)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
