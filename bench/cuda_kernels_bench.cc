// Times every CUDA kernel family on the seed's shapes (B=8, S=1024, D=2048, H=16, F=8192,
// V=32000, so T=B·S=8192 tokens) and prints TFLOP/s for the products and attention, GB/s for
// the memory-bound kernels (with their share of the HBM peak, 2 × memory clock × bus width), the
// Llama model's own kernels at its bench size (16 query heads over 4 kv heads, SwiGLU 5632, the
// same T), then the forward of the whole seed model. Usage: cuda_kernels_bench
// [--iterations N] [--device N].
// FLOP counts: a product is 2·m·n·k; attention forward 4·B·H·S²·head_dim (halved when
// causal), backward 2.5× forward (the FlashAttention convention); the head fused with
// cross-entropy 3 products of 2·T·V·D.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "bench/seed_device_tensors.h"
#include "kernels/cuda/attention.h"
#include "worker/backend/cuda_backend.h"
#include "worker/model/minillm.h"

namespace fsdpd {
namespace {

// kTokens token ids spread over the vocabulary (a stride prime to it), the same in every part.
std::vector<int32_t> TokenIds() {
  std::vector<int32_t> ids(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) ids[i] = static_cast<int32_t>((i * 7919) % kVocab);
  return ids;
}

// The device's HBM bandwidth in bytes a second (double data rate over the bus), 0 if unknown.
double HbmPeakBytesPerSecond(int device) {
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    cudaGetLastError();  // clear the error: the bench goes on without the share of the peak
    return 0.0;
  }
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
}

struct Bench {
  CudaBackend* backend;
  cudaStream_t stream;
  int iterations;
  DeviceTensors tensors;
  double hbm_peak = 0.0;  // bytes a second; 0: unknown

  Tensor New(DType dtype, std::vector<int64_t> shape, float fill = 0.01f) {
    return tensors.New(dtype, std::move(shape), fill);
  }

  static void Check(const absl::Status& status) { ExitOnError(status, "error"); }

  // Mean milliseconds per call after warm-up (which also picks the GEMM algorithms).
  double Time(const std::function<absl::Status()>& body) {
    for (int i = 0; i < 3; ++i) Check(body());
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream);
    for (int i = 0; i < iterations; ++i) Check(body());
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    Check(backend->compute_stream().Synchronize());
    return ms / iterations;
  }

  double Flops(const char* name, double flops, const std::function<absl::Status()>& body) {
    const double ms = Time(body);
    std::printf("%-44s %9.3f ms %9.1f TFLOP/s\n", name, ms, flops / (ms * 1e-3) / 1e12);
    return ms;
  }
  void Bytes(const char* name, double bytes, const std::function<absl::Status()>& body) {
    const double ms = Time(body);
    const double rate = bytes / (ms * 1e-3);
    if (hbm_peak > 0.0) {
      std::printf("%-44s %9.3f ms %9.1f GB/s %5.1f%% of HBM peak\n", name, ms, rate / 1e9,
                  100.0 * rate / hbm_peak);
    } else {
      std::printf("%-44s %9.3f ms %9.1f GB/s\n", name, ms, rate / 1e9);
    }
  }
};

void RunGemms(Bench& bench) {
  Ops& ops = bench.backend->ops();
  Stream& stream = bench.backend->compute_stream();
  struct Shape {
    const char* name;
    int64_t out_features, in_features;
    bool bias;
  };
  const Shape shapes[] = {{"attn.in_proj  [T,2048]x[6144,2048]", 3 * kDim, kDim, true},
                          {"attn.out_proj [T,2048]x[2048,2048]", kDim, kDim, true},
                          {"ffn.0         [T,2048]x[8192,2048]", kHidden, kDim, false},
                          {"ffn.2         [T,8192]x[2048,8192]", kDim, kHidden, false}};
  for (const Shape& s : shapes) {
    Tensor x = bench.New(DType::kBF16, {kTokens, s.in_features});
    Tensor weight = bench.New(DType::kBF16, {s.out_features, s.in_features});
    Tensor bias = s.bias ? bench.New(DType::kBF16, {s.out_features}) : Tensor{};
    Tensor out = bench.New(DType::kBF16, {kTokens, s.out_features});
    Tensor dx = bench.New(DType::kBF16, {kTokens, s.in_features});
    Tensor dweight = bench.New(DType::kF32, {s.out_features, s.in_features}, 0.0f);
    Tensor dbias = s.bias ? bench.New(DType::kF32, {s.out_features}, 0.0f) : Tensor{};
    const double flops = 2.0 * kTokens * s.out_features * s.in_features;
    std::printf("gemm %s\n", s.name);
    bench.Flops("  forward (bias epilogue)", flops,
                [&] { return ops.LinearForward(x, weight, bias, out, stream); });
    bench.Flops("  input gradient", flops, [&] {
      return ops.LinearBackward(out, x, weight, dx, Tensor{}, Tensor{}, Write::kAccumulate, stream);
    });
    bench.Flops("  weight gradient (fp32 +=, bgrad epilogue)", flops, [&] {
      return ops.LinearBackward(out, x, weight, Tensor{}, dweight, dbias, Write::kAccumulate,
                                stream);
    });
  }
  std::printf("gemm plans cached: %lld, of which unfused epilogues: %lld\n",
              static_cast<long long>(bench.backend->gemm().cached_plans()),
              static_cast<long long>(bench.backend->gemm().unfused_plans()));
}

void RunAttention(Bench& bench) {
  Ops& ops = bench.backend->ops();
  Stream& stream = bench.backend->compute_stream();
  Tensor qkv = bench.New(DType::kBF16, {kBatch, kSeq, 3 * kDim}, 0.02f);
  Tensor out = bench.New(DType::kBF16, {kBatch, kSeq, kDim});
  Tensor lse = bench.New(DType::kF32, {kBatch, kHeads, kSeq});
  Tensor dout = bench.New(DType::kBF16, {kBatch, kSeq, kDim});
  Tensor dqkv = bench.New(DType::kBF16, {kBatch, kSeq, 3 * kDim});
  const double head_dim = static_cast<double>(kDim / kHeads);
  for (bool causal : {false, true}) {
    const double forward = 4.0 * kBatch * kHeads * kSeq * kSeq * head_dim / (causal ? 2.0 : 1.0);
    std::printf("attention B=8 S=1024 H=16 head_dim=128 %s\n", causal ? "causal" : "no mask");
    bench.Flops("  forward", forward, [&] {
      return ops.AttentionForward(qkv, kHeads, kHeads, causal, out, lse, stream);
    });
    bench.Flops("  backward", 2.5 * forward, [&] {
      return ops.AttentionBackward(dout, qkv, out, lse, kHeads, kHeads, causal, dqkv, stream);
    });
  }
}

// The Llama model's kernels at bench/anchor's Llama size: D=2048 as 16 query heads over 4 kv
// heads of 128, SwiGLU 5632, on the seed's T=8192 tokens. Bytes are each kernel's floor: what it
// must read and write once (rotary touches q and k only; v stays where it is).
constexpr int64_t kKvHeads = 4, kLlamaFfn = 5632;

void RunLlama(Bench& bench) {
  Ops& ops = bench.backend->ops();
  Stream& stream = bench.backend->compute_stream();
  const int64_t head_dim = kDim / kHeads;
  const int64_t width = (kHeads + 2 * kKvHeads) * head_dim;
  Tensor qkv = bench.New(DType::kBF16, {kBatch, kSeq, width}, 0.02f);
  Tensor out = bench.New(DType::kBF16, {kBatch, kSeq, kDim});
  Tensor lse = bench.New(DType::kF32, {kBatch, kHeads, kSeq});
  Tensor dout = bench.New(DType::kBF16, {kBatch, kSeq, kDim});
  Tensor dqkv = bench.New(DType::kBF16, {kBatch, kSeq, width});
  std::printf("llama kernels T=8192 D=2048 H=16 kv_heads=4 head_dim=128 F=5632\n");
  const double rotated_bytes = 2.0 * kTokens * (kHeads + kKvHeads) * head_dim;
  bench.Bytes("  rotary forward (q and k in place)", 2 * rotated_bytes,
              [&] { return ops.Rotary(qkv, kHeads, kKvHeads, 10000.0, false, stream); });
  bench.Bytes("  rotary inverse (the backward, on dqkv)", 2 * rotated_bytes,
              [&] { return ops.Rotary(dqkv, kHeads, kKvHeads, 10000.0, true, stream); });

  const double tf = static_cast<double>(kTokens) * kLlamaFfn;
  Tensor gate_up = bench.New(DType::kBF16, {kTokens, 2 * kLlamaFfn});
  Tensor activated = bench.New(DType::kBF16, {kTokens, kLlamaFfn});
  Tensor activated_gradient = bench.New(DType::kBF16, {kTokens, kLlamaFfn});
  Tensor gate_up_gradient = bench.New(DType::kBF16, {kTokens, 2 * kLlamaFfn});
  bench.Bytes("  swiglu forward", tf * 6,
              [&] { return ops.SwigluForward(gate_up, activated, stream); });
  bench.Bytes("  swiglu backward", tf * 10, [&] {
    return ops.SwigluBackward(activated_gradient, gate_up, gate_up_gradient, Tensor{}, stream);
  });
  // In place over gate_up, with out recomputed in the same pass (the model's FFN backward).
  bench.Bytes("  swiglu backward + forward, in place", tf * 12, [&] {
    return ops.SwigluBackward(activated_gradient, gate_up, gate_up, activated, stream);
  });

  for (bool causal : {false, true}) {
    const double forward = 4.0 * kBatch * kHeads * kSeq * kSeq * head_dim / (causal ? 2.0 : 1.0);
    std::printf("attention B=8 S=1024 H=16 kv_heads=4 head_dim=128 %s\n",
                causal ? "causal" : "no mask");
    bench.Flops("  forward", forward, [&] {
      return ops.AttentionForward(qkv, kHeads, kKvHeads, causal, out, lse, stream);
    });
    bench.Flops("  backward", 2.5 * forward, [&] {
      return ops.AttentionBackward(dout, qkv, out, lse, kHeads, kKvHeads, causal, dqkv, stream);
    });
  }
}

void RunMemoryBound(Bench& bench) {
  Ops& ops = bench.backend->ops();
  Stream& stream = bench.backend->compute_stream();
  const double td = static_cast<double>(kTokens) * kDim;
  const double tf = static_cast<double>(kTokens) * kHidden;
  Tensor x = bench.New(DType::kBF16, {kTokens, kDim});
  Tensor y = bench.New(DType::kBF16, {kTokens, kDim});
  Tensor z = bench.New(DType::kBF16, {kTokens, kDim});
  Tensor weight = bench.New(DType::kBF16, {kDim}, 1.0f);
  Tensor rstd = bench.New(DType::kF32, {kTokens});
  Tensor dweight = bench.New(DType::kF32, {kDim}, 0.0f);
  std::printf("memory-bound kernels on [T=8192, D=2048] bf16 (F=8192 for SiLU)\n");
  bench.Bytes("  rmsnorm forward", td * 4 + kTokens * 4.0, [&] {
    return ops.RmsNormForward(x, weight, 1.1920928955078125e-07, y, rstd, Tensor{}, stream);
  });
  bench.Bytes("  rmsnorm backward", td * 6 + kTokens * 4.0, [&] {
    return ops.RmsNormBackward(y, x, weight, rstd, z, Write::kOverwrite, dweight,
                               Write::kAccumulate, Tensor{}, stream);
  });
  // Into the residual stream's gradient: dx is read as well, and the model's add is gone.
  bench.Bytes("  rmsnorm backward, dx accumulated", td * 8 + kTokens * 4.0, [&] {
    return ops.RmsNormBackward(y, x, weight, rstd, z, Write::kAccumulate, dweight,
                               Write::kAccumulate, Tensor{}, stream);
  });
  bench.Bytes("  residual add", td * 6, [&] { return ops.Add(x, y, z, stream); });
  Tensor hidden = bench.New(DType::kBF16, {kTokens, kHidden});
  Tensor activated = bench.New(DType::kBF16, {kTokens, kHidden});
  Tensor hidden_gradient = bench.New(DType::kBF16, {kTokens, kHidden});
  bench.Bytes("  silu forward", tf * 4,
              [&] { return ops.SiluForward(hidden, activated, Tensor{}, stream); });
  bench.Bytes("  silu backward", tf * 6, [&] {
    return ops.SiluBackward(activated, hidden, hidden_gradient, Tensor{}, Tensor{}, Tensor{},
                            stream);
  });
  // In place, with silu's output recomputed in the same pass (the FFN backward's form).
  bench.Bytes("  silu backward + forward, in place", tf * 8, [&] {
    return ops.SiluBackward(hidden_gradient, hidden, hidden_gradient, activated, Tensor{}, Tensor{},
                            stream);
  });

  Tensor embedding = bench.New(DType::kBF16, {kVocab, kDim});
  Tensor embedding_gradient = bench.New(DType::kF32, {kVocab, kDim}, 0.0f);
  Tensor tokens = bench.New(DType::kI32, {kTokens});
  const std::vector<int32_t> ids = TokenIds();
  Bench::Check(bench.backend->CopyToDevice(ids.data(), tokens, stream));
  bench.Bytes("  embedding forward", td * 4,
              [&] { return ops.EmbeddingForward(embedding, tokens, x, stream); });
  bench.Bytes("  embedding backward (deterministic)", td * 2 + td * 8,
              [&] { return ops.EmbeddingBackward(x, tokens, embedding_gradient, stream); });

  const int64_t shard = int64_t{100} << 20;  // 100 Mi fp32 parameters
  Tensor param = bench.New(DType::kF32, {shard});
  Tensor grad = bench.New(DType::kF32, {shard});
  Tensor exp_avg = bench.New(DType::kF32, {shard}, 0.0f);
  Tensor exp_avg_sq = bench.New(DType::kF32, {shard}, 0.0f);
  Tensor narrow = bench.New(DType::kBF16, {shard});
  Tensor result = bench.New(DType::kF32, {1});
  std::printf("optimizer and casts over a flat shard of 100 Mi fp32\n");
  AdamWParams params;
  bench.Bytes("  adamw (fused)", shard * 28.0,
              [&] { return ops.AdamW(param, grad, exp_avg, exp_avg_sq, params, stream); });
  // The optimizer in backward: the update and the gradient's sum of squares in one pass.
  bench.Bytes("  adamw + gradient sum of squares, one pass", shard * 28.0, [&] {
    return ops.AdamWWithGradSquareSum(param, grad, exp_avg, exp_avg_sq, params, result, stream);
  });
  // The master split in halves (kernels/split_master.h): the same 28 bytes an element.
  Tensor low = bench.New(DType::kBF16, {shard});
  bench.Bytes("  adamw, split master", shard * 28.0, [&] {
    return ops.AdamWSplitMaster(narrow, low, grad, exp_avg, exp_avg_sq, params, Tensor{}, stream);
  });
  bench.Bytes("  adamw + gradient sum of squares, split master (two passes)", shard * 28.0, [&] {
    return ops.AdamWSplitMaster(narrow, low, grad, exp_avg, exp_avg_sq, params, result, stream);
  });
  bench.Bytes("  cast fp32 -> bf16", shard * 6.0, [&] { return ops.Cast(param, narrow, stream); });
  bench.Bytes("  cast bf16 -> fp32", shard * 6.0, [&] { return ops.Cast(narrow, grad, stream); });
  bench.Bytes("  fill fp32", shard * 4.0, [&] { return ops.Fill(grad, 0.0f, stream); });
  bench.Bytes("  scale fp32", shard * 8.0, [&] { return ops.Scale(grad, 0.5f, stream); });
  bench.Bytes("  sum of squares fp32", shard * 4.0,
              [&] { return ops.SumOfSquares(param, result, stream); });
}

void RunCrossEntropy(Bench& bench) {
  Ops& ops = bench.backend->ops();
  Stream& stream = bench.backend->compute_stream();
  Tensor x = bench.New(DType::kBF16, {kTokens, kDim});
  Tensor head = bench.New(DType::kBF16, {kVocab, kDim}, 0.001f);
  Tensor targets = bench.New(DType::kI32, {kTokens});
  Bench::Check(ops.Fill(Tensor{targets.data, DType::kF32, {kTokens}}, 0.0f, stream));
  Tensor loss = bench.New(DType::kF32, {1});
  Tensor dx = bench.New(DType::kBF16, {kTokens, kDim});
  Tensor dhead = bench.New(DType::kF32, {kVocab, kDim}, 0.0f);
  std::printf("head + cross-entropy T=8192 D=2048 V=32000 (chunked, bf16 logits)\n");
  bench.Flops("  forward + backward (3 products)", 3 * 2.0 * kTokens * kVocab * kDim,
              [&] { return ops.HeadCrossEntropy(x, head, targets, 1.0, loss, dx, dhead, stream); });
}

// The CUDA engine's forward on the seed model, the figure fsdpd-edge's forward is compared with
// (bench/edge_bench.cc, the same model and batch): the embedding and the 12 blocks through
// MiniLLM (its training forward, so it also keeps the activations a backward would need), then
// the head's product into bf16 logits. The log-softmax over the logits (one memory-bound pass)
// is left out. Parameters are bf16 constants: timing does not depend on their values.
void RunModelForward(Bench& bench) {
  const ModelConfig config;  // vocab 32000, dim 2048, 12 layers, 16 heads, FFN 8192, no mask
  absl::StatusOr<std::unique_ptr<MiniLLM>> model =
      MiniLLM::Create(config, kBatch, kSeq, bench.backend);
  Bench::Check(model.status());
  std::vector<Tensor> params;
  for (const UnitLayout& unit : (*model)->units()) {
    params.push_back(bench.New(DType::kBF16, {unit.numel}, 0.001f));
  }
  const std::vector<int32_t> ids = TokenIds();
  Bench::Check((*model)->BeginStep(ids.data(), ids.data()));
  const double d = kDim;
  const double trunk_flops = config.layers * (2.0 * kTokens * (4 * d * d + 2 * d * kHidden) +
                                              4.0 * kBatch * kSeq * kSeq * d);
  std::printf("model forward, seed shape (B=8, S=1024, no mask)\n");
  const double trunk_ms = bench.Flops("  embedding + 12 blocks (MiniLLM)", trunk_flops, [&] {
    FSDPD_RETURN_IF_ERROR((*model)->EmbedForward(params.back()));
    for (int layer = 0; layer < config.layers; ++layer) {
      FSDPD_RETURN_IF_ERROR((*model)->BlockForward(layer, params[static_cast<size_t>(layer)]));
    }
    return absl::OkStatus();
  });
  Tensor head_input = bench.New(DType::kBF16, {kTokens, kDim});
  Tensor head = bench.New(DType::kBF16, {kVocab, kDim}, 0.001f);
  Tensor logits = bench.New(DType::kBF16, {kTokens, kVocab}, 0.0f);
  const double head_ms =
      bench.Flops("  head product [T,2048]x[32000,2048]", 2.0 * kTokens * kVocab * d, [&] {
        return bench.backend->ops().LinearForward(head_input, head, Tensor{}, logits,
                                                  bench.backend->compute_stream());
      });
  std::printf("  forward (the two above): %.3f ms, %.0f tokens/s\n", trunk_ms + head_ms,
              kTokens / ((trunk_ms + head_ms) * 1e-3));
}

}  // namespace
}  // namespace fsdpd

int main(int argc, char** argv) {
  int iterations = 20;
  int device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iterations") == 0) iterations = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--device") == 0) device = std::atoi(argv[i + 1]);
  }
  if (iterations < 1) {
    std::fprintf(stderr, "--iterations must be >= 1\n");
    return 2;
  }
  fsdpd::CudaBackendConfig config;
  config.device = device;
  auto backend = fsdpd::CudaBackend::Create(config);
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  auto stream = fsdpd::CudaStreamOf((*backend)->compute_stream());
  fsdpd::Bench bench{backend->get(), *stream, iterations, fsdpd::DeviceTensors(backend->get()),
                     fsdpd::HbmPeakBytesPerSecond(device)};
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, device);
  std::printf("device %s, HBM peak %.0f GB/s, %d iterations per figure\n", properties.name,
              bench.hbm_peak / 1e9, iterations);
  fsdpd::RunGemms(bench);
  fsdpd::RunAttention(bench);
  fsdpd::RunCrossEntropy(bench);
  fsdpd::RunMemoryBound(bench);
  fsdpd::RunLlama(bench);
  fsdpd::RunModelForward(bench);
  std::printf("peak device memory: %.1f GiB\n",
              (*backend)->memory_stats().peak_bytes / double(1 << 30));
  bench.tensors.Clear();
  return 0;
}
