// fsdpd-edge's throughput on one Vulkan device: a model of the given shape with random weights
// is written as an export (config metadata and all) and read back as fsdpd-edge reads it; then
// forward tokens/s (forward plus log-softmax NLL, the `eval` work) and the matmul shader's
// TFLOP/s, each with cooperative matrices and with the tiled shader, and the time to place the
// weights zero-copy and through staging; with --causal also decoding's tokens/s through the
// qkv cache (the `generate` work); --decode-only times decoding alone, in each of matvec.comp's
// layouts (and int8's wide words), with cooperative matrices and zero-copy weights, then each of
// decoding's products alone (TimeMatvecs); --sync-floor times a dependent dispatch against a
// grid-wide barrier (what one dispatch an op costs decoding), and --matvec-chain decoding's
// projections a dispatch each against one persistent dispatch; --export-only writes the export and
// stops (bench/llama_cpp/edge_vs_llama.sh converts it for llama.cpp). Random weights time the
// same as trained ones.
//
//   edge_bench [--dim 2048 --layers 12 --heads 16 --vocab 32000 --ffn-mult 4]
//              [--batch 8 --seq 1024 --iters 5 --device 0 --model /tmp/edge_bench.safetensors]
//              [--coop-blocks] [--attention-sweep] [--sweep-only] [--coop-block 128x128k32]
//              [--fp32] [--mma-peak] [--staged-breakdown] [--sync-floor] [--matvec-chain]
//              [--causal [--decode-only]]
//              [--op-times] [--export-only] [--weights int8 [--int8-block NAME]]
//
// --weights int8: the linear layers and the head quantized to int8 on load (edge/quantize.h),
// in the check against the CPU (whose weights are the same dequantized values), the forward, the
// matmul timings and decoding. --int8-block pins their matmul to one candidate
// (VulkanOptions::int8_block), so that each can be checked and timed by name.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "base/status_macros.h"
#include "bench/edge_probe_reports.h"
#include "edge/cpu_backend.h"
#include "edge/model.h"
#include "edge/quantize.h"
#include "edge/random_model.h"
#include "edge/shaders.h"
#include "edge/vulkan_backend.h"
#include "formats/model_metadata.h"
#include "formats/safetensors.h"

namespace fsdpd::edge {
namespace {

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "edge_bench: %s\n", std::string(status.message()).c_str());
  return 1;
}

// The worst |gpu − cpu| over CheckMatmul's fp16 bound for one shape.
absl::StatusOr<double> WorstOverBound(const std::vector<float>& x, const std::vector<float>& w,
                                      const std::vector<float>& b, int64_t m, int64_t n, int64_t k,
                                      bool has_bias, const std::vector<float>& gpu_out,
                                      const std::vector<float>& cpu_out) {
  double worst = 0.0;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double magnitude = 0.0;
      for (int64_t i = 0; i < k; ++i) magnitude += std::fabs(x[r * k + i] * w[c * k + i]);
      const double bound = (2.0 / 2048 + 1.0 / (1 << 22) + 2.0 * k / (1 << 24)) * magnitude +
                           (has_bias ? std::fabs(b[c]) / 2048 : 0.0) + 1e-30;
      const double error = std::fabs(gpu_out[r * n + c] - cpu_out[r * n + c]);
      if (!std::isfinite(gpu_out[r * n + c])) return absl::InternalError("non-finite output");
      worst = std::max(worst, error / bound);
    }
  }
  return worst;
}

// The matmul against the CPU reference, with edge_kernels_test's fp16 bound
// (|Δ| ≤ (2·2^-11 + 2^-22 + 2·K·2^-24)·Σ|x·w| + 2^-11·|bias|): returns the worst error / bound
// (≤ 1 passes). The shapes cover the shaders' edge handling on the device, which CI (lavapipe,
// no cooperative matrices) cannot: M, N and K ragged against the output blocks and K slices,
// K not a multiple of 8 (scalar loads), tiny ones, whole blocks with and without bias (the
// cooperative-matrix shader stores those directly), and a long K. With `int8`, the weights are
// quantized (Backend::Int8Weight), both sides multiplying by q·scale: the int8
// cooperative-matrix blocks round it to fp16 as fp16 weights are rounded, so the bound holds;
// each shape runs twice on the device, x fp32 and x as the forward holds it (MatmulInput, fp16
// where the matmul reads fp16 x: the int8 blocks' fp16-x builds), whose rounding the bound's
// 2^-11 for x covers.
absl::StatusOr<double> CheckMatmul(Backend& gpu, bool int8) {
  struct Shape {
    int64_t m, n, k;
    bool bias;
  };
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  double worst = 0.0;
  for (const Shape& s :
       {Shape{77, 70, 45, true}, Shape{130, 129, 256, false}, Shape{1, 3, 8, true},
        Shape{1, 1, 1, false}, Shape{200, 300, 520, true}, Shape{257, 130, 40, false},
        Shape{256, 256, 512, false}, Shape{256, 256, 512, true}, Shape{128, 190, 36, false},
        Shape{256, 192, 2048, false}}) {
    const auto [m, n, k, has_bias] = s;
    const std::vector<float> x = RandomValues(m * k, 1.0f, 11);
    std::vector<float> w = RandomValues(n * k, 1.0f, 12);
    const std::vector<float> b = RandomValues(n, 1.0f, 13);
    FSDPD_ASSIGN_OR_RETURN(const Int8Tensor quantized, QuantizeInt8("w", w.data(), n, k));
    if (int8) w = quantized.Dequantize();
    std::vector<float> gpu_out(static_cast<size_t>(m * n)), cpu_out(gpu_out.size());
    for (const bool as_input : {false, true}) {
      if (as_input && !int8) break;
      for (Backend* backend : {&gpu, cpu.get()}) {
        auto weight = int8 ? backend->Int8Weight(quantized) : backend->Weight(w.data(), n * k);
        auto bias = backend->Weight(b.data(), n);
        auto input = backend->Floats(m * k);
        auto zeros = backend->Floats(m * k);
        auto held = backend->MatmulInput(m * k);
        auto output = backend->Floats(m * n);
        if (!weight.ok() || !bias.ok() || !input.ok() || !zeros.ok() || !held.ok() ||
            !output.ok()) {
          return absl::InternalError("allocation");
        }
        std::vector<float>& out = backend == &gpu ? gpu_out : cpu_out;
        const std::vector<float> zero(static_cast<size_t>(m * k), 0.0f);
        absl::Status status = backend->WriteFloats(**input, x.data(), m * k);
        if (status.ok()) status = backend->WriteFloats(**zeros, zero.data(), m * k);
        if (status.ok()) status = backend->Add(**input, **zeros, m * k, **held);
        Buffer& source = as_input && backend == &gpu ? **held : **input;
        if (status.ok()) {
          status = backend->Linear(source, **weight, has_bias ? bias->get() : nullptr, m, k, n,
                                   **output);
        }
        if (status.ok()) status = backend->ReadFloats(**output, out.data(), m * n);
        if (!status.ok()) return status;
      }
      FSDPD_ASSIGN_OR_RETURN(const double shape_worst,
                             WorstOverBound(x, w, b, m, n, k, has_bias, gpu_out, cpu_out));
      worst = std::max(worst, shape_worst);
    }
  }
  return worst;
}

// Seconds per call of `op` on the backend: a quarter second of warm-up calls (an idle GPU
// clocks down between the CPU-side checks, and takes longer than a few calls to clock up),
// then five rounds of `repeats` calls recorded back to back and finished together; the median
// round counts (the GPU is shared: one round can be slowed by another tenant).
absl::StatusOr<double> SecondsPerCall(Backend& backend, int repeats,
                                      const std::function<absl::Status()>& op) {
  auto run = [&](int count) -> absl::Status {
    for (int i = 0; i < count; ++i) FSDPD_RETURN_IF_ERROR(op());
    return backend.Finish();
  };
  const auto warm_up = std::chrono::steady_clock::now();
  do {
    FSDPD_RETURN_IF_ERROR(run(2));
  } while (Seconds(warm_up) < 0.25);
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    FSDPD_RETURN_IF_ERROR(run(repeats));
    rounds.push_back(Seconds(start) / repeats);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

// The operands of a timed product y[m, n] = x[m, k] · w[n, k]ᵀ: random weights (int8 quantized
// where asked), x in fp32, and x again as the forward holds it (Backend::MatmulInput: fp16 where
// the matmul reads fp16 x, written once by an Add).
struct ProductOperands {
  std::unique_ptr<Buffer> weight, x, x_input, y;
};

absl::StatusOr<ProductOperands> MakeProductOperands(VulkanBackend& backend, int64_t m, int64_t n,
                                                    int64_t k, bool int8) {
  const std::vector<float> w = RandomValues(n * k, 0.02f, 7);
  FSDPD_ASSIGN_OR_RETURN(const Int8Tensor quantized, QuantizeInt8("w", w.data(), n, k));
  auto weight = int8 ? backend.Int8Weight(quantized) : backend.Weight(w.data(), n * k);
  auto x = backend.Floats(m * k);
  auto zeros = backend.Floats(m * k);
  auto x_input = backend.MatmulInput(m * k);
  auto y = backend.Floats(m * n);
  if (!weight.ok() || !x.ok() || !zeros.ok() || !x_input.ok() || !y.ok()) {
    return absl::InternalError("allocation failed");
  }
  const std::vector<float> input = RandomValues(m * k, 1.0f, 8);
  FSDPD_RETURN_IF_ERROR(backend.WriteFloats(**x, input.data(), m * k));
  const std::vector<float> zero(static_cast<size_t>(m * k), 0.0f);
  FSDPD_RETURN_IF_ERROR(backend.WriteFloats(**zeros, zero.data(), m * k));
  FSDPD_RETURN_IF_ERROR(backend.Add(**x, **zeros, m * k, **x_input));
  return ProductOperands{std::move(*weight), std::move(*x), std::move(*x_input), std::move(*y)};
}

// The matmul alone on the forward's two FFN shapes: TFLOP/s each, printed twice: with x in fp32
// (a block that reads fp16 x casts it first, and the cast is timed), and with x as the forward
// holds it (Backend::MatmulInput: fp16 where the matmul reads fp16 x, written once by an Add), the
// figure to hold against cuBLASLt, whose x is bf16.
absl::Status TimeMatmuls(VulkanBackend& backend, int64_t rows, int64_t dim, int64_t ffn_mult,
                         bool int8) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{rows, ffn_mult * dim, dim},
                         {rows, dim, ffn_mult * dim}}) {
    FSDPD_ASSIGN_OR_RETURN(const ProductOperands operands,
                           MakeProductOperands(backend, m, n, k, int8));
    for (auto [source, what] :
         {std::pair<Buffer*, const char*>{operands.x.get(), "x fp32, cast timed"},
          {operands.x_input.get(), "x as the forward holds it"}}) {
      FSDPD_ASSIGN_OR_RETURN(const double each, SecondsPerCall(backend, 10, [&] {
                               return backend.Linear(*source, *operands.weight, nullptr, m, k, n,
                                                     *operands.y);
                             }));
      std::printf("  matmul %lldx%lldx%lld (%s): %.4g TFLOP/s (%.3f ms)\n", (long long)m,
                  (long long)n, (long long)k, what, 2.0 * m * n * k / each * 1e-12, each * 1e3);
    }
  }
  return absl::OkStatus();
}

// Decoding's products alone: M = 1, so the backend runs matvec.comp (matvec_int8.comp with int8
// weights) in its layout, on each of a block's four weight shapes and the head's, 64 dispatches
// a round (the backend batches them into few submits): the time of one, and the rate it streams
// its weights (int8: a byte a weight and 2 of scale per 32). Then a token's worth of them back to
// back (layers × the block's four, and the head), to hold against decoding's time a token: what
// is left of that is the rest of the token (attention, the small ops, the host).
absl::Status TimeMatvecs(VulkanBackend& backend, const ExportedModelConfig& config, bool int8) {
  const int64_t d = config.dim, f = config.ffn_mult * config.dim;
  const double weight_bytes = int8 ? 1.0 + 2.0 / kInt8Group : backend.uses_fp16() ? 2.0 : 4.0;
  struct Shape {
    const char* name;
    int64_t n, k, per_token;
  };
  const Shape shapes[] = {{"qkv", 3 * d, d, config.layers},
                          {"out_proj", d, d, config.layers},
                          {"ffn.0", f, d, config.layers},
                          {"ffn.2", d, f, config.layers},
                          {"head", config.vocab, d, 1}};
  double token_seconds = 0.0, token_bytes = 0.0;
  for (const Shape& shape : shapes) {
    FSDPD_ASSIGN_OR_RETURN(const ProductOperands operands,
                           MakeProductOperands(backend, 1, shape.n, shape.k, int8));
    FSDPD_ASSIGN_OR_RETURN(const double each, SecondsPerCall(backend, 64, [&] {
                             return backend.Linear(*operands.x_input, *operands.weight, nullptr, 1,
                                                   shape.k, shape.n, *operands.y);
                           }));
    const double bytes = weight_bytes * static_cast<double>(shape.n * shape.k);
    std::printf("  matvec %s 1x%lldx%lld: %.1f us, %.3g GB/s of weights\n", shape.name,
                (long long)shape.n, (long long)shape.k, each * 1e6, bytes / each * 1e-9);
    token_seconds += each * static_cast<double>(shape.per_token);
    token_bytes += bytes * static_cast<double>(shape.per_token);
  }
  std::printf("  a token's matvecs back to back: %.3f ms, %.3g GB/s of weights\n",
              token_seconds * 1e3, token_bytes / token_seconds * 1e-9);
  return absl::OkStatus();
}

// Attention alone on the forward's shape: TFLOP/s (4·batch·seq²·dim, halved when causal).
absl::Status TimeAttention(VulkanBackend& backend, int64_t batch, int64_t seq,
                           const ExportedModelConfig& config) {
  const int64_t count = batch * seq * 3 * config.dim;
  auto qkv = backend.Floats(count);
  auto out = backend.Floats(batch * seq * config.dim);
  if (!qkv.ok() || !out.ok()) return absl::InternalError("allocation failed");
  const std::vector<float> values = RandomValues(count, 1.0f, 9);
  FSDPD_RETURN_IF_ERROR(backend.WriteFloats(**qkv, values.data(), count));
  FSDPD_ASSIGN_OR_RETURN(const double each, SecondsPerCall(backend, 10, [&] {
                           return backend.Attention(**qkv, batch, seq, config.heads, config.dim,
                                                    config.causal, **out);
                         }));
  const double flops = 4.0 * batch * seq * seq * config.dim * (config.causal ? 0.5 : 1.0);
  std::printf(
      "  attention %lldx%lld, %lld heads%s: %.4g TFLOP/s (%.3f ms; ×%lld layers: %.1f ms)\n",
      (long long)batch, (long long)seq, (long long)config.heads, config.causal ? ", causal" : "",
      flops / each * 1e-12, each * 1e3, (long long)config.layers, each * 1e3 * config.layers);
  return absl::OkStatus();
}

// Decoding through the qkv cache (a causal model, batch 1): a prompt of seq/2 tokens, then one
// position a token up to the window's end (Append: logits read back each token, checked against
// the forward's), then the same positions with greedy picks left on the device (AppendGreedy,
// `generate`'s path), against a whole-window forward a token (`generate --no-kv-cache`). A
// first round picks every shape's blocks and is not timed. The
// products' weights (`matmul_weights` of them, the head's included; the embedding reads one row)
// over the time a token give the rate they are read at: decoding reads each of them once a
// token, so on a GPU it is bound by memory, not by the matrix units.
// With op times on, the timed round's decoding is broken down by shader.
absl::Status TimeDecoding(const HostModel& model, VulkanBackend& backend, int64_t seq,
                          double matmul_weights, WeightFormat weights) {
  const ExportedModelConfig& config = model.config;
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                         ModelRunner::Create(model, &backend, 1, seq, weights));
  // int8: a byte a weight and 2 of scale per 32.
  const double weight_bytes = weights == WeightFormat::kInt8 ? 1.0 + 2.0 / kInt8Group
                              : backend.uses_fp16()          ? 2.0
                                                             : 4.0;
  std::vector<int32_t> window(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) window[i] = static_cast<int32_t>((i * 7919) % config.vocab);
  const std::vector<int32_t> prompt(window.begin(), window.begin() + seq / 2);
  std::vector<float> logits;
  double prefill = 0.0, appended = 0.0;
  int64_t sets_before = 0;
  for (int round = 0; round < 2; ++round) {
    auto start = std::chrono::steady_clock::now();
    FSDPD_RETURN_IF_ERROR(runner->Prefill(prompt, &logits));
    prefill = Seconds(start);
    backend.ResetOpTimes();
    sets_before = backend.descriptor_sets_written();
    start = std::chrono::steady_clock::now();
    for (int64_t i = seq / 2; i < seq; ++i)
      FSDPD_RETURN_IF_ERROR(runner->Append(window[i], &logits));
    appended = Seconds(start);
  }
  const int64_t steps = seq - seq / 2;
  const int64_t sets_written = backend.descriptor_sets_written() - sets_before;
  const std::vector<OpTime> op_times = backend.op_times();
  const std::vector<OpTime> host_times = backend.host_times();
  const std::vector<float> decoded = logits;  // the last position's, through the cache
  // The same positions as `generate` decodes them: greedy picks left on the device
  // (ModelRunner::AppendGreedy), read back kGreedySteps at a time, after the same prompt.
  FSDPD_RETURN_IF_ERROR(runner->Prefill(prompt, &logits));
  std::vector<int32_t> picked;
  auto start = std::chrono::steady_clock::now();
  for (int64_t done = 0; done < steps;) {
    const int64_t count = std::min(ModelRunner::kGreedySteps, steps - done);
    FSDPD_RETURN_IF_ERROR(
        runner->AppendGreedy(done == 0 ? window[seq / 2] : picked.back(), count, &picked));
    done += count;
  }
  const double greedy = Seconds(start);
  start = std::chrono::steady_clock::now();
  constexpr int kWholeWindows = 3;
  for (int i = 0; i < kWholeWindows; ++i) FSDPD_RETURN_IF_ERROR(runner->Logits(window, &logits));
  const double whole = Seconds(start) / kWholeWindows;
  // The same position through the whole-window forward: the cache's rows, matvec.comp and
  // attention_decode.comp against the forward's attention and matmuls. fp16 on both sides rounds
  // the same inputs, so what is left is fp32 order and an fp16 rounding falling the other way: 1e-3
  // of the largest |logit|, the bound tests/edge/edge_decoding_test.cc states.
  double largest = 0.0, worst = 0.0;
  const float* last_row = logits.data() + (seq - 1) * config.vocab;
  for (int64_t v = 0; v < config.vocab; ++v) {
    largest = std::max(largest, std::fabs(double(last_row[v])));
    worst = std::max(worst, std::fabs(double(decoded[v]) - last_row[v]));
  }
  const bool agrees = worst <= 1e-3 * largest;
  std::printf(
      "  decoded logits against the whole-window forward's at position %lld: worst difference "
      "%.3g of the largest |logit| %.3g (bound 1e-3: %s)\n",
      (long long)(seq - 1), largest > 0 ? worst / largest : worst, largest,
      agrees ? "pass" : "FAIL");
  const double per_token = appended / steps;
  std::printf(
      "  decoding (batch 1): prompt of %lld in %.1f ms, then %.0f tokens/s (%.3f ms a token, "
      "weights read at %.3g GB/s); a whole-window forward a token: %.1f tokens/s (%.1f ms)\n",
      (long long)prompt.size(), prefill * 1e3, 1.0 / per_token, per_token * 1e3,
      matmul_weights * weight_bytes / per_token * 1e-9, 1.0 / whole, whole * 1e3);
  std::printf(
      "  decoding with greedy picks on the device (generate's path): %.0f tokens/s "
      "(%.3f ms a token)\n",
      static_cast<double>(steps) / greedy, greedy / static_cast<double>(steps) * 1e3);
  std::printf("  descriptor sets written while decoding: %lld (%.2f a token)\n",
              (long long)sets_written, static_cast<double>(sets_written) / steps);
  if (!op_times.empty()) {
    std::printf("  %s", FormatOpTimes(op_times, appended, steps, "token", host_times).c_str());
  }
  if (!agrees) return absl::InternalError("decoded logits disagree with the forward's");
  return absl::OkStatus();
}

// Checked against the CPU and printed; false when it fails.
bool ReportMatmulCheck(Backend& backend, bool int8 = false) {
  absl::StatusOr<double> check = CheckMatmul(backend, int8);
  if (!check.ok()) {
    Fail(check.status());
    return false;
  }
  std::printf(
      "  matmul%s vs the CPU reference on ragged and whole-block shapes: worst error %.3f of the "
      "fp16 bound (%s)\n",
      int8 ? " (int8 weights)" : "", *check, *check <= 1.0 ? "pass" : "FAIL");
  return *check <= 1.0;
}

// Every cooperative-matrix block shape (edge/shaders.h), each checked and timed on the FFN
// shapes: which block the default should be.
int SweepCoopBlocks(int device, int64_t rows, int64_t dim, int64_t ffn_mult) {
  int failures = 0;
  for (const CoopMatmulVariant& variant : CoopMatmulVariants()) {
    VulkanOptions options;
    options.device = device;
    options.precision = VulkanOptions::Precision::kFp16;
    options.coop_block = variant.block;
    absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
    if (!backend.ok()) {
      failures += Fail(backend.status());
      continue;
    }
    std::printf("\n[coop block %s] %s\n", variant.block, (*backend)->Describe().c_str());
    if (!(*backend)->uses_cooperative_matrix()) {
      std::printf("  no cooperative matrices with this block here: skipped\n");
      continue;
    }
    if (!ReportMatmulCheck(**backend)) {
      ++failures;
      continue;
    }
    if (absl::Status timed = TimeMatmuls(**backend, rows, dim, ffn_mult, false); !timed.ok()) {
      failures += Fail(timed);
    }
  }
  return failures;
}

// Attention against the CPU reference: returns the worst error / bound (≤ 1 passes). The bound
// per output of query i: q·scale, k, v and the weights P are rounded to fp16 (2^-11 relative
// each), so a score moves by at most 2·2^-11·A_i (A_i = max_j Σ_d |q_d·k_jd|·scale) plus fp32
// summation, a weight's relative error is at most twice that plus P's rounding, and the
// weighted mean of v then moves by at most (4·2^-11·A_i + 4·2^-11)·max|v|, doubled for the fp32
// sums of either side. The shapes: head_dim 16 to 128, ragged sequences (tiles of 64 queries
// and 32 keys), one key for the first causal query, both masks; those up to max_head_dim.
absl::StatusOr<double> CheckAttention(Backend& gpu, int64_t max_head_dim = 128) {
  struct Shape {
    int64_t batch, seq, heads, head_dim;
  };
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  double worst = 0.0;
  constexpr double kU16 = 1.0 / 2048;
  for (const Shape& s : {Shape{2, 77, 2, 64}, Shape{1, 130, 4, 128}, Shape{1, 33, 1, 16},
                         Shape{2, 64, 2, 32}, Shape{1, 257, 2, 128}}) {
    if (s.head_dim > max_head_dim) continue;
    for (const bool causal : {false, true}) {
      const int64_t dim = s.heads * s.head_dim;
      const int64_t count = s.batch * s.seq * 3 * dim;
      const std::vector<float> qkv = RandomValues(count, 1.0f, 21);
      std::vector<float> gpu_out(static_cast<size_t>(s.batch * s.seq * dim)),
          cpu_out(gpu_out.size());
      for (Backend* backend : {&gpu, cpu.get()}) {
        auto in = backend->Floats(count);
        auto out = backend->Floats(s.batch * s.seq * dim);
        if (!in.ok() || !out.ok()) return absl::InternalError("allocation");
        FSDPD_RETURN_IF_ERROR(backend->WriteFloats(**in, qkv.data(), count));
        FSDPD_RETURN_IF_ERROR(
            backend->Attention(**in, s.batch, s.seq, s.heads, dim, causal, **out));
        FSDPD_RETURN_IF_ERROR(backend->ReadFloats(
            **out, (backend == &gpu ? gpu_out : cpu_out).data(), s.batch * s.seq * dim));
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
      auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
        return static_cast<double>(qkv[((b * s.seq + t) * 3 + part) * dim + h * s.head_dim + d]);
      };
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t h = 0; h < s.heads; ++h) {
          for (int64_t i = 0; i < s.seq; ++i) {
            double score_sum = 0.0, v_max = 0.0;
            for (int64_t j = 0; j <= (causal ? i : s.seq - 1); ++j) {
              double sum = 0.0;
              for (int64_t d = 0; d < s.head_dim; ++d) {
                sum += std::fabs(at(b, i, 0, h, d) * at(b, j, 1, h, d));
                v_max = std::max(v_max, std::fabs(at(b, j, 2, h, d)));
              }
              score_sum = std::max(score_sum, sum * scale);
            }
            const double bound = 2.0 * (4 * kU16 * score_sum + 4 * kU16) * v_max + 1e-30;
            for (int64_t d = 0; d < s.head_dim; ++d) {
              const size_t o = static_cast<size_t>((b * s.seq + i) * dim + h * s.head_dim + d);
              if (!std::isfinite(gpu_out[o])) return absl::InternalError("non-finite output");
              worst = std::max(worst, std::fabs(gpu_out[o] - cpu_out[o]) / bound);
            }
          }
        }
      }
    }
  }
  return worst;
}

struct Variant {
  const char* name;
  bool coop;
  bool staging;
  VulkanOptions::Precision precision;
};

// Every attention shader on cooperative matrices (attention_coop.comp and the workgroup-scope
// ones, edge/shaders.h), each pinned, checked against the CPU and timed on the model's shape.
int SweepAttention(int device, int64_t batch, int64_t seq, const ExportedModelConfig& config) {
  std::vector<std::pair<std::string, int64_t>> names = {{"subgroup", 128}};  // largest head_dim
  for (const AttentionVariant& variant : AttentionCm2Shaders()) {
    names.push_back({variant.name, VariantOf(variant.shader).block.cols});
  }
  int failures = 0;
  for (const auto& [name, max_head_dim] : names) {
    VulkanOptions options;
    options.device = device;
    options.precision = VulkanOptions::Precision::kFp16;
    options.attention = name;
    absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
    std::printf("\n[attention %s]\n", name.c_str());
    if (!backend.ok()) {
      std::printf("  not available: %s\n", std::string(backend.status().message()).c_str());
      continue;
    }
    absl::StatusOr<double> check = CheckAttention(**backend, max_head_dim);
    if (!check.ok()) {
      failures += Fail(check.status());
      continue;
    }
    std::printf(
        "  vs the CPU reference (head_dim ≤ %lld): worst error %.3f of the fp16 bound (%s)\n",
        (long long)max_head_dim, *check, *check <= 1.0 ? "pass" : "FAIL");
    if (*check > 1.0) {
      ++failures;
      continue;
    }
    if (absl::Status timed = TimeAttention(**backend, batch, seq, config); !timed.ok()) {
      std::printf("  not timed: %s\n", std::string(timed.message()).c_str());
    }
  }
  return failures;
}

}  // namespace
}  // namespace fsdpd::edge

int main(int argc, char** argv) {
  using namespace fsdpd;
  using namespace fsdpd::edge;
  ExportedModelConfig config{.vocab = 32000,
                             .dim = 2048,
                             .layers = 12,
                             .heads = 16,
                             .ffn_mult = 4,
                             .causal = false,
                             .final_norm = false,
                             .norm_eps = 1.1920928955078125e-07};
  int64_t batch = 8, seq = 1024;
  int iters = 5, device = 0;
  std::string model_path = "/tmp/edge_bench.safetensors";
  bool fp32 = false;
  bool coop_sweep = false;
  std::string coop_block;
  CLI::App app{"edge_bench: fsdpd-edge forward tokens/s and matmul TFLOP/s on a Vulkan device"};
  app.add_option("--dim", config.dim);
  app.add_option("--layers", config.layers);
  app.add_option("--heads", config.heads);
  app.add_option("--vocab", config.vocab);
  app.add_option("--ffn-mult", config.ffn_mult);
  app.add_flag("--causal", config.causal);
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--iters", iters);
  app.add_option("--device", device);
  app.add_option("--model", model_path, "where the random export is written");
  bool reuse_model = false;
  app.add_flag("--reuse-model", reuse_model,
               "read the export already at --model (its own shape) instead of writing one");
  app.add_flag("--fp32", fp32, "also time the fp32 path");
  app.add_flag("--coop-blocks", coop_sweep,
               "first check and time the matmul with every cooperative-matrix block shape");
  bool sweep_only = false;
  app.add_flag("--sweep-only", sweep_only,
               "with --coop-blocks or --attention-sweep: only the sweeps, no forward");
  bool attention_sweep = false;
  app.add_flag("--attention-sweep", attention_sweep,
               "first check and time each attention shader on cooperative matrices");
  bool mma_peak = false;
  app.add_flag("--mma-peak", mma_peak,
               "first time the matrix units alone through workgroup-scope cooperative matrices "
               "(the ceiling of every matmul block; with --sweep-only nothing else)");
  bool sync_floor = false;
  app.add_flag("--sync-floor", sync_floor,
               "first time what ordering decoding's ops costs: a dependent dispatch against a "
               "grid-wide barrier inside one dispatch (with --sweep-only nothing else)");
  bool matvec_chain = false;
  app.add_flag("--matvec-chain", matvec_chain,
               "first time decoding's projections as a chain: a dispatch a stage against one "
               "dispatch with grid-wide barriers (with --sweep-only nothing else)");
  bool staged_breakdown = false;
  app.add_flag("--staged-breakdown", staged_breakdown,
               "first time the staged workgroup-scope blocks' feed and products apart on the FFN "
               "shapes, with each matmul pipeline's driver statistics (with --sweep-only nothing "
               "else)");
  app.add_option("--coop-block", coop_block,
                 "the cooperative-matrix block the variants use (default: the built default)");
  bool decode_only = false;
  bool op_times = false;
  app.add_flag("--op-times", op_times,
               "time every GPU command: decoding's GPU time by shader (and its host share)");
  bool no_fuse_into_linear = false;
  app.add_flag("--no-fuse-into-linear", no_fuse_into_linear,
               "decode with each norm, SiLU, residual add and cache copy as its own dispatch");
  bool separate_combine = false;
  app.add_flag("--separate-combine", separate_combine,
               "decode with the attention's slices added by a dispatch of their own");
  int submit_every = VulkanOptions{}.submit_every;
  app.add_option("--submit-every", submit_every,
                 "commands recorded before they are submitted without waiting (0: one submit at "
                 "each wait)");
  bool no_set_cache = false;
  app.add_flag("--no-set-cache", no_set_cache,
               "write a descriptor set for every dispatch instead of keeping one per "
               "(pipeline, buffers) pair");
  app.add_flag("--decode-only", decode_only,
               "with --causal: only decoding, in each of matvec.comp's layouts (narrow, wide, "
               "and wide with 2 and 4 columns a subgroup; also wide words with --weights int8)");
  bool export_only = false;
  app.add_flag("--export-only", export_only,
               "only write the random export to --model (for fsdpd-edge and other runtimes) and "
               "exit; no device is opened");
  std::string weights_name = "auto";
  app.add_option("--weights", weights_name,
                 "auto, or int8: the linear layers and the head quantized on load")
      ->check(CLI::IsMember({"auto", "int8"}));
  std::string int8_block;
  app.add_option("--int8-block", int8_block,
                 "with --weights int8: the int8 matmul by name (\"int8 128x256k32cm2h-s\", \"int8 "
                 "tiled\"; default: each, the fastest per shape)");
  CLI11_PARSE(app, argc, argv);
  const bool int8 = weights_name == "int8";
  const WeightFormat weights = int8 ? WeightFormat::kInt8 : WeightFormat::kAuto;
  // Alone (with --sweep-only), the ordering probes need no model.
  if ((sync_floor || matvec_chain) && sweep_only && !coop_sweep && !attention_sweep && !mma_peak &&
      !staged_breakdown) {
    int failures = sync_floor ? ReportSyncFloor(device) : 0;
    if (matvec_chain) failures += ReportMatvecChain(device, config);
    return failures == 0 ? 0 : 1;
  }
  if (decode_only && !config.causal) {
    std::fprintf(stderr,
                 "edge_bench: --decode-only needs --causal (decoding is for causal models)\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line reaches the log at once

  auto start = std::chrono::steady_clock::now();
  if (!reuse_model) {
    if (absl::Status written =
            WriteExportedModel(model_path, config, RandomModelTensors(config, 1, /*noise=*/0.0f));
        !written.ok()) {
      return Fail(written);
    }
  }
  if (export_only) {
    std::printf(
        "export of dim %lld layers %lld heads %lld vocab %lld ffn_mult %lld%s written to "
        "%s in %.1f s\n",
        (long long)config.dim, (long long)config.layers, (long long)config.heads,
        (long long)config.vocab, (long long)config.ffn_mult, config.causal ? " (causal)" : "",
        model_path.c_str(), Seconds(start));
    return 0;
  }
  absl::StatusOr<HostModel> model = LoadHostModel(model_path);
  if (!model.ok()) return Fail(model.status());
  if (reuse_model) config = model->config;  // the shapes below are the file's
  std::printf(
      "model dim %lld layers %lld heads %lld vocab %lld ffn_mult %lld, batch %lld × seq "
      "%lld; written and read back in %.1f s\n",
      (long long)config.dim, (long long)config.layers, (long long)config.heads,
      (long long)config.vocab, (long long)config.ffn_mult, (long long)batch, (long long)seq,
      Seconds(start));
  const int64_t rows = batch * seq;
  const double d = static_cast<double>(config.dim);
  const double gemm_flops =
      2.0 * rows *
      (config.layers * (4.0 * d * d + 2.0 * config.ffn_mult * d * d) + d * config.vocab);
  const double attention_flops =
      4.0 * batch * seq * seq * d * config.layers * (config.causal ? 0.5 : 1.0);
  std::printf("forward: %.2f TFLOP (GEMMs %.2f, attention %.2f)\n",
              (gemm_flops + attention_flops) * 1e-12, gemm_flops * 1e-12, attention_flops * 1e-12);

  std::vector<Variant> variants = {
      {"coop-matrix fp16, zero-copy", true, false, VulkanOptions::Precision::kFp16},
      {"tiled fp16, zero-copy", false, false, VulkanOptions::Precision::kFp16},
      {"fp16, staging (coop-matrix where present)", true, true, VulkanOptions::Precision::kFp16}};
  if (fp32) variants.push_back({"tiled fp32", false, false, VulkanOptions::Precision::kFp32});
  // A pinned int8 matmul is one of the first variant's (the others would refuse its name).
  if (!int8_block.empty()) variants.resize(1);
  std::vector<int32_t> tokens(static_cast<size_t>(rows)), targets(tokens.size());
  std::mt19937 random(1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(random() % config.vocab);
    targets[i] = static_cast<int32_t>(random() % config.vocab);
  }
  // A variant that fails (a driver refusing a pipeline, say) is reported and the next one runs.
  auto run_variant = [&](const Variant& variant, VulkanOptions::MatvecLayout layout) -> int {
    VulkanOptions options;
    options.matvec_layout = layout;
    options.device = device;
    options.cooperative_matrix = variant.coop;
    options.force_staging = variant.staging;
    options.precision = variant.precision;
    options.coop_block = coop_block;
    options.int8_block = int8_block;
    options.op_times = op_times;
    options.cache_descriptor_sets = !no_set_cache;
    options.fuse_into_linear = !no_fuse_into_linear;
    options.combine_in_attention = !separate_combine;
    options.submit_every = submit_every;
    options.pipeline_statistics = decode_only;  // the matvecs' registers, printed after them
    absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
    if (!backend.ok()) return Fail(backend.status());
    // The layout by name: the backend line names the int8 matvec only once int8 weights are
    // placed, after it is printed.
    std::printf("\n[%s, matvec %s] %s\n", variant.name, MatvecLayoutName(layout),
                (*backend)->Describe().c_str());
    if (decode_only) {  // on the matrix units where the device has them, else tiled
      absl::Status timed = TimeDecoding(*model, **backend, seq, gemm_flops / (2.0 * rows), weights);
      if (timed.ok()) timed = TimeMatvecs(**backend, config, int8);
      for (const std::string& line : (*backend)->pipeline_statistics()) {
        if (absl::StartsWith(line, "matvec"))
          std::printf("  pipeline statistics, %s\n", line.c_str());
      }
      return timed.ok() ? 0 : Fail(timed);
    }
    if (variant.coop && !variant.staging && !(*backend)->uses_cooperative_matrix()) {
      std::printf("  no cooperative matrices on this device: skipped\n");
      return 0;
    }
    if (!ReportMatmulCheck(**backend, int8)) return 1;
    absl::StatusOr<double> attention_check = CheckAttention(**backend);
    if (!attention_check.ok()) return Fail(attention_check.status());
    std::printf(
        "  attention vs the CPU reference (head_dim 16-128, ragged, both masks): worst error "
        "%.3f of the fp16 bound (%s)\n",
        *attention_check, *attention_check <= 1.0 ? "pass" : "FAIL");
    if (*attention_check > 1.0) return 1;
    start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(*model, backend->get(), batch, seq, weights);
    if (!runner.ok()) return Fail(runner.status());
    std::printf("  weights placed in %.2f s (%.1f MiB%s)\n", Seconds(start),
                static_cast<double>((*runner)->weight_bytes()) / (1 << 20), int8 ? ", int8" : "");
    absl::StatusOr<double> nll = (*runner)->SumNll(tokens, targets);  // warm-up
    if (!nll.ok()) return Fail(nll.status());
    start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      nll = (*runner)->SumNll(tokens, targets);
      if (!nll.ok()) return Fail(nll.status());
    }
    const double seconds = Seconds(start) / iters;
    std::printf(
        "  forward: %.0f tokens/s (%.1f ms per batch, %.4g TFLOP/s overall), mean nll "
        "%.4f\n",
        rows / seconds, seconds * 1e3, (gemm_flops + attention_flops) / seconds * 1e-12,
        *nll / rows);
    if (absl::Status timed = TimeMatmuls(**backend, rows, config.dim, config.ffn_mult, int8);
        !timed.ok()) {
      return Fail(timed);
    }
    if (absl::Status timed = TimeAttention(**backend, batch, seq, config); !timed.ok()) {
      return Fail(timed);
    }
    if (config.causal) {
      // Every product's FLOPs a position are twice its weights.
      if (absl::Status timed =
              TimeDecoding(*model, **backend, seq, gemm_flops / (2.0 * rows), weights);
          !timed.ok()) {
        return Fail(timed);
      }
    }
    for (const std::string& choice : (*backend)->matmul_choices()) {
      std::printf("  tuned block, %s\n", choice.c_str());
    }
    if ((*backend)->validation_errors() != 0) {
      return Fail(absl::InternalError("validation errors"));
    }
    return 0;
  };
  int failures = mma_peak ? ReportMatrixUnitPeak(device) : 0;
  if (sync_floor) failures += ReportSyncFloor(device);  // beside other probes
  if (matvec_chain) failures += ReportMatvecChain(device, config);
  if (staged_breakdown)
    failures += ReportStagedBreakdown(device, rows, config.dim, config.ffn_mult);
  if (coop_sweep) failures += SweepCoopBlocks(device, rows, config.dim, config.ffn_mult);
  if (coop_sweep || attention_sweep) failures += SweepAttention(device, batch, seq, config);
  if ((coop_sweep || attention_sweep || mma_peak || staged_breakdown || sync_floor) && sweep_only) {
    variants.clear();
  }
  if (decode_only && !variants.empty()) {  // (a --sweep-only run has no variant left)
    std::vector<VulkanOptions::MatvecLayout> layouts = {
        VulkanOptions::MatvecLayout::kNarrow, VulkanOptions::MatvecLayout::kWide,
        VulkanOptions::MatvecLayout::kWide2, VulkanOptions::MatvecLayout::kWide4};
    // Words a lane change only the int8 matvec (edge/shaders/matvec_int8.comp).
    if (int8) layouts.push_back(VulkanOptions::MatvecLayout::kWideWords);
    for (const auto layout : layouts) failures += run_variant(variants.front(), layout);
    return failures == 0 ? 0 : 1;
  }
  for (const Variant& variant : variants) {
    failures += run_variant(variant, VulkanOptions::MatvecLayout::kAuto);
  }
  return failures == 0 ? 0 : 1;
}
