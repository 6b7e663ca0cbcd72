"""The PyTorch peer of cuda_kernels_bench: the same shapes and FLOP/byte conventions, timed the
same way (CUDA events, 3 warm-ups, mean of --iterations), so both can be run back to back on
one GPU and compared line by line. Usage: python3 cuda_kernels_peer.py [--iterations N]."""
import argparse

import torch
import torch.nn.functional as F

B, S, D, H, FF, V = 8, 1024, 2048, 16, 8192, 32000
T = B * S


def timed(body, iterations):
    for _ in range(3):
        body()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        body()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / iterations


def flops(name, count, body, iterations):
    ms = timed(body, iterations)
    print(f"{name:<44} {ms:9.3f} ms {count / (ms * 1e-3) / 1e12:9.1f} TFLOP/s")


def bandwidth(name, count, body, iterations):
    ms = timed(body, iterations)
    print(f"{name:<44} {ms:9.3f} ms {count / (ms * 1e-3) / 1e9:9.1f} GB/s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=20)
    n = parser.parse_args().iterations
    dev, bf16 = "cuda", torch.bfloat16
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {n} iterations")
    for name, out_f, in_f, bias in [("attn.in_proj", 3 * D, D, True), ("attn.out_proj", D, D, True),
                                    ("ffn.0", FF, D, False), ("ffn.2", D, FF, False)]:
        x = torch.randn(T, in_f, device=dev, dtype=bf16)
        w = torch.randn(out_f, in_f, device=dev, dtype=bf16) * 0.02
        b = torch.randn(out_f, device=dev, dtype=bf16) if bias else None
        g = torch.randn(T, out_f, device=dev, dtype=bf16)
        dw = torch.zeros(out_f, in_f, device=dev, dtype=torch.float32)
        count = 2.0 * T * out_f * in_f
        print(f"gemm {name}")
        flops("  forward (F.linear)", count, lambda: F.linear(x, w, b), n)
        flops("  input gradient (g @ w)", count, lambda: g @ w, n)
        flops("  weight gradient (fp32 +=)", count, lambda: dw.add_((g.t() @ x).float()), n)
    head_dim = D // H
    q, k, v = (torch.randn(B, H, S, head_dim, device=dev, dtype=bf16, requires_grad=True)
               for _ in range(3))
    for causal in (False, True):
        fwd = 4.0 * B * H * S * S * head_dim / (2 if causal else 1)
        print(f"attention sdpa B=8 S=1024 H=16 head_dim=128 {'causal' if causal else 'no mask'}")
        flops("  forward", fwd, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), n)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        do = torch.randn_like(o)
        flops("  backward", 2.5 * fwd,
              lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True), n)
    x = torch.randn(T, D, device=dev, dtype=bf16, requires_grad=True)
    head = (torch.randn(V, D, device=dev, dtype=bf16) * 0.001).requires_grad_()
    targets = torch.randint(0, V, (T,), device=dev)

    def head_loss():
        loss = F.cross_entropy(F.linear(x, head).float(), targets)
        loss.backward()

    print("head + cross-entropy T=8192 D=2048 V=32000 (torch: fp32 logits)")
    flops("  forward + backward (3 products)", 3 * 2.0 * T * V * D, head_loss, n)
    print("memory-bound kernels on [T=8192, D=2048] bf16 (F=8192 for SiLU)")
    xs = torch.randn(T, D, device=dev, dtype=bf16)
    ys = torch.randn(T, D, device=dev, dtype=bf16)
    weight = torch.ones(D, device=dev, dtype=bf16)
    bandwidth("  rmsnorm forward", T * D * 4.0, lambda: F.rms_norm(xs, (D,), weight), n)
    bandwidth("  residual add", T * D * 6.0, lambda: xs + ys, n)
    hidden = torch.randn(T, FF, device=dev, dtype=bf16)
    bandwidth("  silu forward", T * FF * 4.0, lambda: F.silu(hidden), n)
    shard = 100 << 20
    param = torch.nn.Parameter(torch.randn(shard, device=dev))
    param.grad = torch.randn(shard, device=dev)
    optimizer = torch.optim.AdamW([param], lr=3e-4, fused=True)
    print("optimizer and casts over a flat shard of 100 Mi fp32")
    bandwidth("  adamw (fused=True)", shard * 28.0, optimizer.step, n)
    bandwidth("  cast fp32 -> bf16", shard * 6.0, lambda: param.data.to(bf16), n)


if __name__ == "__main__":
    main()
