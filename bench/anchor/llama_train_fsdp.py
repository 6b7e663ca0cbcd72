# The PyTorch anchor for a Llama-style model (model.arch llama, examples/llama.yaml): plain torch
# modules with Hugging Face's LlamaForCausalLM math (RMSNorm, rotary positions in the
# rotate_half convention, grouped-query attention through
# F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=True), SwiGLU, no biases, a
# final norm), sharded and stepped exactly as the seed's script (seed_train_fsdp.py): FSDP2
# fully_shard per block then the root, bf16 parameters with fp32 reduction, AdamW, optional
# per-block compile (COMPILE=1). Same flags (environment) and the same RESULT line, so the bench
# scripts run it in the seed's place: ANCHOR=bench/anchor/llama_train_fsdp.py
# SPEC=examples/llama.yaml bench/gpu_seed.sh.
import os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
try:
    from torch.distributed._composable.fsdp import fully_shard, MixedPrecisionPolicy
except ImportError:
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy

DIM = int(os.environ.get("DIM", 2048)); LAYERS = int(os.environ.get("LAYERS", 12))
BATCH = int(os.environ.get("BATCH", 8)); SEQ = int(os.environ.get("SEQ", 1024))
STEPS = int(os.environ.get("STEPS", 30)); WARM = int(os.environ.get("WARM", 10))
HEADS = int(os.environ.get("HEADS", 16)); KV_HEADS = int(os.environ.get("KV_HEADS", 4))
FFN = int(os.environ.get("FFN", 5632)); THETA = float(os.environ.get("ROPE_THETA", 10000))
EPS = float(os.environ.get("NORM_EPS", 1e-5))
VOCAB = 32000


class Rotary(nn.Module):
    """cos and sin of position · theta^(-2i/hd), fp32, as transformers' LlamaRotaryEmbedding."""
    def __init__(self, head_dim, theta):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seq, device):
        freqs = torch.arange(seq, device=device, dtype=torch.float)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class Mlp(nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn, eps):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(dim, eps=eps)
        self.self_attn = Attention(dim, heads, kv_heads)
        self.post_attention_layernorm = nn.RMSNorm(dim, eps=eps)
        self.mlp = Mlp(dim, ffn)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, vocab, dim, layers, heads, kv_heads, ffn, theta, eps):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(
            [DecoderLayer(dim, heads, kv_heads, ffn, eps) for _ in range(layers)])
        self.norm = nn.RMSNorm(dim, eps=eps)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.rotary = Rotary(dim // heads, theta)

    def forward(self, idx):
        x = self.embed_tokens(idx)
        cos, sin = self.rotary(idx.shape[1], idx.device)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def main():
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"]); world = dist.get_world_size()
    torch.cuda.set_device(local_rank); device = torch.device("cuda", local_rank)
    model = Llama(VOCAB, DIM, LAYERS, HEADS, KV_HEADS, FFN, THETA, EPS).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        if os.environ.get("COMPILE") == "1":
            layer.compile()  # per-block compile, as TorchTitan does
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    times = []
    for step in range(STEPS):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)
        targets = torch.randint(0, VOCAB, (BATCH, SEQ), device=device)
        opt.zero_grad()
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        loss.backward(); opt.step()
        l = loss.item(); torch.cuda.synchronize(); dt = time.perf_counter() - t0
        if step >= WARM: times.append(dt)
        if local_rank == 0 and (step < 3 or step % 10 == 0):
            print(f"Step {step} | Loss: {l:.4f} | Peak VRAM/GPU: {torch.cuda.max_memory_allocated(device)/1e9:.2f} GB | {dt*1e3:.1f} ms", flush=True)
    if local_rank == 0:
        times.sort(); med = times[len(times)//2]
        tok = BATCH * SEQ * world
        # The seed script's convention (6·N + 12·layers·seq·dim), as fsdpd's FlopsPerToken: the
        # attention term counts the full square although the mask is causal.
        flops_tok = 6 * nparams + 12 * LAYERS * SEQ * DIM
        print(f"RESULT world={world} params={nparams} batch={BATCH}x{SEQ} median_step_ms={med*1e3:.1f} "
              f"tokens_per_s={tok/med:.0f} tflops_per_gpu={flops_tok*tok/med/world/1e12:.1f} "
              f"peak_alloc_gb={torch.cuda.max_memory_allocated(device)/1e9:.2f} "
              f"peak_reserved_gb={torch.cuda.max_memory_reserved(device)/1e9:.2f} "
              f"device_used_gb={(lambda f,t:(t-f)/1e9)(*torch.cuda.mem_get_info(device)):.2f} compile={os.environ.get('COMPILE','0')}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
