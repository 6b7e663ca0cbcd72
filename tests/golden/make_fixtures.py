"""Generates the PyTorch golden fixtures the engine is checked against.

Run where PyTorch is installed (the GPU machine has it):
    python3 tests/golden/make_fixtures.py tests/golden/tiny

The model classes are the seed's (bench/anchor's PyTorch model) with the head count passed through. Everything
runs in fp32 on the CPU with deterministic algorithms, so the fixtures are exact references
for the fp32 CPU engine. The data for the loss trajectory follows the `tokens` loader's window
rule: global window k = (step·world·batch + rank·batch + i) mod num_windows,
num_windows = (num_tokens − 1) // seq, inputs = tokens[k·seq : k·seq+seq], targets shifted by 1.
"""
import json
import os
import struct
import sys

import torch
import torch.nn as nn

CONFIG = dict(vocab=64, dim=32, layers=2, heads=4, ffn_mult=4, batch=2, seq=16,
              lr=1e-3, weight_decay=0.01, beta1=0.9, beta2=0.999, eps=1e-8,
              trajectory_steps=20, trajectory_lr=3e-3, num_tokens=4001, seed=1234)


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, ffn_mult):
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.attn = nn.MultiheadAttention(dim, n_heads, batch_first=True)
        self.norm2 = nn.RMSNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, dim * ffn_mult, bias=False), nn.SiLU(),
                                 nn.Linear(dim * ffn_mult, dim, bias=False))

    def forward(self, x):
        h = self.norm1(x)
        attn_out, _ = self.attn(h, h, h, need_weights=False)
        x = x + attn_out
        return x + self.ffn(self.norm2(x))


class MiniLLM(nn.Module):
    def __init__(self, vocab, dim, n_layers, n_heads, ffn_mult):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            [TransformerBlock(dim, n_heads, ffn_mult) for _ in range(n_layers)])
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def write_safetensors(path, tensors):
    """A minimal safetensors writer (the format is a JSON header and raw little-endian data)."""
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors.items():
        data = tensor.detach().to(torch.float32).contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header_bytes = json.dumps(header).encode()
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header_bytes)))
        out.write(header_bytes)
        for blob in blobs:
            out.write(blob)


def make_model(c):
    torch.manual_seed(c["seed"])
    return MiniLLM(c["vocab"], c["dim"], c["layers"], c["heads"], c["ffn_mult"])


def loss_of(model, inputs, targets, vocab):
    logits = model(inputs)
    return logits, nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))


def main(out_dir):
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    c = CONFIG
    os.makedirs(out_dir, exist_ok=True)
    model = make_model(c)
    init = {name: p.detach().clone() for name, p in model.state_dict().items()}
    write_safetensors(os.path.join(out_dir, "init.safetensors"), init)

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
                      {name: p.grad for name, p in model.named_parameters()})

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
                      {name: p for name, p in model.state_dict().items()})

    # A loss trajectory over a token file with structure worth learning: a noisy
    # arithmetic sequence, so the loss visibly falls.
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
    print(f"torch {torch.__version__}: loss {loss_of(make_model(c), inputs, targets, c['vocab'])[1].item():.6f}, "
          f"trajectory {trajectory[0]:.4f} -> {trajectory[-1]:.4f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "tiny"))
