#include "bench/edge_probe_reports.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/edge_matvec_chain.h"
#include "bench/edge_probes.h"
#include "edge/vulkan_backend.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "edge_bench: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

// The matrix units' rate with no memory traffic (MatrixUnitPeakTflops, bench/edge_probes.h),
// three times: the ceiling to hold the matmul blocks' TFLOP/s against.
int ReportMatrixUnitPeak(int device) {
  VulkanOptions options;
  options.device = device;
  options.precision = VulkanOptions::Precision::kFp16;
  absl::StatusOr<std::unique_ptr<VulkanContext>> context = VulkanContext::Create(options);
  if (!context.ok()) return Fail(context.status());
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<double> peak = MatrixUnitPeakTflops(**context);
    if (!peak.ok()) {
      std::printf("matrix units alone: %s\n", std::string(peak.status().message()).c_str());
      return 0;
    }
    std::printf(
        "matrix units alone (workgroup-scope cooperative matrices, 128x256 block, fp16 products "
        "summed in fp32, operands in registers): %.1f TFLOP/s\n",
        *peak);
  }
  return 0;
}

// What ordering decoding's ops costs (bench/edge_probes.h), twice each: a dependent dispatch of
// one workgroup and of a matvec's grid (the seed's qkv at 2 columns a subgroup: 768 workgroups),
// as decoding pays once an op; and a grid-wide barrier inside one dispatch across 66, 132 and
// 264 workgroups (half, one and two a streaming multiprocessor on an H100 or H200), as a
// persistent kernel would pay instead.
int ReportSyncFloor(int device) {
  VulkanOptions options;
  options.device = device;
  absl::StatusOr<std::unique_ptr<VulkanContext>> context = VulkanContext::Create(options);
  if (!context.ok()) return Fail(context.status());
  int failures = 0;
  for (int round = 0; round < 2; ++round) {
    for (const uint32_t groups : {1u, 132u, 768u}) {
      absl::StatusOr<double> us = DependentDispatchMicroseconds(**context, groups);
      if (!us.ok()) {
        std::printf("a dependent dispatch, %u workgroups:\n    %s\n", groups,
                    std::string(us.status().message()).c_str());
        ++failures;
        continue;
      }
      std::printf("a dependent dispatch, %u workgroups of 128: %.2f us\n", groups, *us);
    }
    for (const uint32_t groups : {66u, 132u, 264u}) {
      absl::StatusOr<double> us = GridBarrierMicroseconds(**context, groups);
      if (!us.ok()) {
        std::printf("a grid-wide barrier, %u workgroups:\n    %s\n", groups,
                    std::string(us.status().message()).c_str());
        if (us.status().code() != absl::StatusCode::kFailedPrecondition) ++failures;
        continue;
      }
      std::printf("a grid-wide barrier, %u workgroups of 128: %.2f us\n", groups, *us);
    }
  }
  return failures;
}

// Decoding's projections as a chain (bench/edge_matvec_chain.h), fp16 then int8: the model's
// layers (as many as one buffer holds), a dispatch a stage against one dispatch with grid-wide
// barriers on 132, 264 and 528 workgroups (one, two and four a streaming multiprocessor on an
// H100 or H200), with and without each stage's first weights read before its barrier; each
// order's output against a dispatch a stage's, bit for bit, first.
int ReportMatvecChain(int device, const ExportedModelConfig& config) {
  VulkanOptions options;
  options.device = device;
  absl::StatusOr<std::unique_ptr<VulkanContext>> context = VulkanContext::Create(options);
  if (!context.ok()) return Fail(context.status());
  int failures = 0;
  for (const bool int8 : {false, true}) {
    const char* weights = int8 ? "int8" : "fp16";
    // qkv, out_proj, ffn.0 and ffn.2: (4 + 2 · ffn_mult) · dim² weights a layer.
    const double layer_bytes = (4.0 + 2.0 * static_cast<double>(config.ffn_mult)) *
                               static_cast<double>(config.dim * config.dim) * (int8 ? 1 : 2);
    const int64_t layers = std::clamp<int64_t>(
        static_cast<int64_t>((*context)->limits().maxStorageBufferRange / layer_bytes), 1,
        config.layers);
    const MatvecChain chain =
        RandomMatvecChain(DecodingStages(config.dim, config.ffn_mult, layers), int8, 1);
    absl::StatusOr<std::unique_ptr<MatvecChainOnDevice>> on_device =
        MatvecChainOnDevice::Create(**context, chain);
    if (!on_device.ok()) {
      std::printf("matvec chain, %s weights: %s\n", weights,
                  std::string(on_device.status().message()).c_str());
      ++failures;
      continue;
    }
    const double bytes = layer_bytes * static_cast<double>(layers);
    std::vector<float> x(static_cast<size_t>(config.dim));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    absl::StatusOr<std::vector<float>> expected =
        (*on_device)->Run(x, ChainOrder::kDispatchEach, 1);
    if (!expected.ok()) return Fail(expected.status());
    std::printf("matvec chain, %s weights: %lld layers x 4 stages, %.0f MB\n", weights,
                (long long)layers, bytes / 1e6);
    auto report = [&](ChainOrder order, uint32_t groups) {
      const std::string what = order == ChainOrder::kDispatchEach
                                   ? ChainOrderName(order)
                                   : absl::StrCat(ChainOrderName(order), ", ", groups, " groups");
      absl::StatusOr<std::vector<float>> out = (*on_device)->Run(x, order, groups);
      absl::StatusOr<double> us =
          out.ok() ? (*on_device)->Time(order, groups) : absl::StatusOr<double>(out.status());
      if (!us.ok()) {
        std::printf("  %s:\n    %s\n", what.c_str(), std::string(us.status().message()).c_str());
        if (us.status().code() != absl::StatusCode::kFailedPrecondition) ++failures;
        return;
      }
      const bool same = out->size() == expected->size() &&
                        std::memcmp(out->data(), expected->data(), out->size() * 4) == 0;
      if (!same) ++failures;
      std::printf("  %s: %.1f us, %.2f a stage, %.0f GB/s%s\n", what.c_str(), *us,
                  *us / static_cast<double>(chain.stages.size()), bytes / *us / 1e3,
                  same ? "" : "; OTHER BITS than a dispatch a stage");
    };
    for (int round = 0; round < 2; ++round) {
      report(ChainOrder::kDispatchEach, 1);
      for (const uint32_t groups : {132u, 264u, 528u}) {
        report(ChainOrder::kPersistent, groups);
        report(ChainOrder::kPersistentPrefetch, groups);
      }
    }
  }
  return failures;
}

// What bounds the staged workgroup-scope blocks on the FFN's two shapes (StagedMatmulBreakdown,
// bench/edge_probes.h), twice each, and every matmul pipeline's statistics from the driver where
// it keeps them (registers per invocation, shared memory): the backend's, then the probes' own.
int ReportStagedBreakdown(int device, int64_t rows, int64_t dim, int64_t ffn_mult) {
  VulkanOptions options;
  options.device = device;
  options.precision = VulkanOptions::Precision::kFp16;
  options.pipeline_statistics = true;
  {
    absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
    if (!backend.ok()) return Fail(backend.status());
    for (const std::string& line : (*backend)->pipeline_statistics()) {
      std::printf("pipeline statistics, %s\n", line.c_str());
    }
  }
  absl::StatusOr<std::unique_ptr<VulkanContext>> context = VulkanContext::Create(options);
  if (!context.ok()) return Fail(context.status());
  const int64_t hidden = ffn_mult * dim;
  for (const auto& [name, n, k] : {std::tuple<const char*, int64_t, int64_t>{"FFN up", hidden, dim},
                                   {"FFN down", dim, hidden}}) {
    for (int round = 0; round < 2; ++round) {
      absl::StatusOr<std::vector<StagedMatmulRate>> rates =
          StagedMatmulBreakdown(**context, rows, n, k);
      if (!rates.ok()) {
        std::printf("staged blocks taken apart: %s\n",
                    std::string(rates.status().message()).c_str());
        return rates.status().code() == absl::StatusCode::kUnavailable ? 0 : 1;
      }
      for (const StagedMatmulRate& rate : *rates) {
        std::printf("%s %lldx%lldx%lld, %s: %.1f TFLOP/s%s%s\n", name, (long long)rows,
                    (long long)n, (long long)k, rate.what.c_str(), rate.tflops,
                    rate.statistics.empty() || round > 0 ? "" : "; ",
                    round > 0 ? "" : rate.statistics.c_str());
      }
    }
  }
  return 0;
}

}  // namespace fsdpd::edge
