#include "bench/edge_probes.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/edge_probe_support.h"
#include "bench/edge_shaders/variants.h"
#include "edge/shaders.h"
#include "edge/vulkan_op_checks.h"
#include "formats/half.h"

namespace fsdpd::edge {
namespace {

constexpr const char* kNoCm2 =
    "no workgroup-scope cooperative matrices here (VK_NV_cooperative_matrix2 with fp16)";

constexpr uint32_t kProbeThreads = 128;  // sync_chain.comp's and grid_barrier.comp's local size

}  // namespace

absl::StatusOr<double> MatrixUnitPeakTflops(VulkanContext& context) {
  const ShaderVariant& shader = VariantOf(ProbeShader::kMmaPeakCm2);
  if (!context.cm2() || !context.fp16() || !shader.built()) {
    return absl::UnavailableError(kNoCm2);
  }
  const int64_t rows = shader.block.rows, cols = shader.block.cols, slice = shader.slice;
  // Enough workgroups to fill any GPU several times over, enough steps that the launch and the
  // accumulators' final store are under 1% of the time.
  constexpr uint32_t kGroups = 1056, kSteps = 1024;
  ScopedPipeline peak(context);
  FSDPD_RETURN_IF_ERROR(peak.Make(shader));
  // The operands, 1/64 in fp16 each, in device-local memory (read once per workgroup).
  const std::vector<uint16_t> halves(static_cast<size_t>((rows + cols) * slice),
                                     FloatToHalf(1.0f / 64));
  FSDPD_ASSIGN_OR_RETURN(
      std::unique_ptr<VulkanBuffer> operands,
      context.CreateFilledBuffer(halves.data(), halves.size() * 2, /*zero_copy=*/true));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> out,
                         context.CreateBuffer(uint64_t{kGroups} * rows * cols * 4, false));
  FSDPD_ASSIGN_OR_RETURN(
      const double seconds, BestSeconds(context, [&] {
        return context.Dispatch(peak.get(), {operands.get(), out.get()}, &kSteps, kGroups, 1);
      }));
  return 2.0 * rows * cols * slice * kSteps * kGroups / seconds / 1e12;
}

absl::StatusOr<std::vector<StagedMatmulRate>> StagedMatmulBreakdown(VulkanContext& context,
                                                                    int64_t m, int64_t n,
                                                                    int64_t k) {
  struct Probe {
    const ShaderVariant& shader;
    const char* what;
  };
  const Probe probes[] = {
      {VariantOf(Shader::kMatmulCm2128x128K64HS), "128x128k64cm2h-s, the matmul"},
      {VariantOf(ProbeShader::kMatmulFeed128x128K64), "128x128k64cm2h-s, its feed alone"},
      {VariantOf(ProbeShader::kMatmulNoFeed128x128K64), "128x128k64cm2h-s, its products alone"},
      {VariantOf(Shader::kMatmulCm2128x256HS), "128x256k32cm2h-s, the matmul"},
      {VariantOf(ProbeShader::kMatmulFeed128x256), "128x256k32cm2h-s, its feed alone"},
      {VariantOf(ProbeShader::kMatmulNoFeed128x256), "128x256k32cm2h-s, its products alone"},
  };
  // Whole blocks only: the probes exist for the staged fast path, which no ragged block takes.
  // The shape is checked first, on any device: a variant's block is in its row, built or not.
  std::vector<std::pair<uint32_t, uint32_t>> grids;
  for (const Probe& probe : probes) {
    const OutputBlock block = probe.shader.block;
    if (m <= 0 || n <= 0 || k <= 0 || m % block.rows != 0 || n % block.cols != 0 ||
        k % probe.shader.slice != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("the staged blocks' breakdown needs whole blocks: M a multiple of ",
                       block.rows, ", N of ", block.cols, " and K of ", probe.shader.slice,
                       "; got ", m, " x ", n, " x ", k));
    }
    FSDPD_ASSIGN_OR_RETURN(grids.emplace_back(),
                           BlockGrid(context.limits(), probe.what, m, n, block));
  }
  if (!context.cm2() || !context.fp16()) return absl::UnavailableError(kNoCm2);
  for (const Probe& probe : probes) {
    if (!probe.shader.built()) return absl::UnavailableError(kNoCm2);
  }
  // fp16 x, w and bias (unused: has_bias 0), fp32 out; what they hold does not change the time.
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> x,
                         context.CreateBuffer(static_cast<uint64_t>(m * k) * 2, false));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> w,
                         context.CreateBuffer(static_cast<uint64_t>(n * k) * 2, false));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> bias,
                         context.CreateBuffer(static_cast<uint64_t>(n) * 2, false));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> out,
                         context.CreateBuffer(static_cast<uint64_t>(m * n) * 4, false));
  const uint32_t push[4] = {static_cast<uint32_t>(m), static_cast<uint32_t>(n),
                            static_cast<uint32_t>(k), 0};
  std::vector<StagedMatmulRate> rates;
  for (size_t p = 0; p < std::size(probes); ++p) {
    const Probe& probe = probes[p];
    ScopedPipeline pipeline(context);
    FSDPD_RETURN_IF_ERROR(pipeline.Make(probe.shader));
    FSDPD_ASSIGN_OR_RETURN(const double seconds, BestSeconds(context, [&] {
                             return context.Dispatch(pipeline.get(),
                                                     {x.get(), w.get(), bias.get(), out.get()},
                                                     push, grids[p].first, grids[p].second);
                           }));
    absl::StatusOr<std::string> statistics = context.Statistics(pipeline.get());
    rates.push_back(
        {probe.what, 2.0 * m * n * k / seconds / 1e12, statistics.ok() ? *statistics : ""});
  }
  return rates;
}

absl::StatusOr<double> DependentDispatchMicroseconds(VulkanContext& context, uint32_t groups,
                                                     int links) {
  FSDPD_RETURN_IF_ERROR(CheckProbeGroups(context, groups));
  if (links < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a chain needs a link or more; got ", links));
  }
  ScopedPipeline link(context);
  FSDPD_RETURN_IF_ERROR(link.Make(VariantOf(ProbeShader::kSyncChain)));
  const uint32_t n = groups * kProbeThreads;
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> counts,
                         context.CreateBuffer(uint64_t{n} * 4, /*host_visible=*/true));
  if (counts->mapped == nullptr) return absl::InternalError("a host-visible buffer is not mapped");
  std::memset(counts->mapped, 0, uint64_t{n} * 4);
  uint32_t recorded = 0;  // links recorded, which every count must equal (modulo 2^32)
  auto chain = [&](int length) {
    return [&, length]() -> absl::Status {
      for (int i = 0; i < length; ++i) {
        FSDPD_RETURN_IF_ERROR(context.Dispatch(link.get(), {counts.get()}, &n, groups, 1));
        ++recorded;
      }
      return absl::OkStatus();
    };
  };
  FSDPD_ASSIGN_OR_RETURN(const double once, BestSeconds(context, chain(links)));
  FSDPD_ASSIGN_OR_RETURN(const double twice, BestSeconds(context, chain(2 * links)));
  const auto* values = static_cast<const uint32_t*>(counts->mapped);
  for (uint32_t i = 0; i < n; ++i) {
    if (values[i] != recorded) {
      return absl::InternalError(absl::StrCat("after ", recorded, " dependent dispatches count ", i,
                                              " is ", values[i], ": a link did not see the last"));
    }
  }
  return (twice - once) / links * 1e6;
}

absl::StatusOr<GridBarrierRun> RunGridBarriers(VulkanContext& context, uint32_t groups,
                                               uint32_t expected_groups, uint32_t barriers,
                                               uint32_t spin_limit) {
  FSDPD_RETURN_IF_ERROR(CheckProbeGroups(context, groups));
  // The count must not wrap: b · expected_groups for every barrier b.
  if (barriers == 0 || expected_groups == 0 || spin_limit == 0 ||
      uint64_t{barriers} * expected_groups >= (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grid-wide barriers need barriers, expected workgroups and a spin limit above 0, and "
        "barriers × expected workgroups below 2^32; got ",
        barriers, ", ", expected_groups, " and ", spin_limit));
  }
  ScopedPipeline pipeline(context);
  FSDPD_RETURN_IF_ERROR(pipeline.Make(VariantOf(ProbeShader::kGridBarrier)));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> sync,
                         context.CreateBuffer(8, /*host_visible=*/true));
  if (sync->mapped == nullptr) return absl::InternalError("a host-visible buffer is not mapped");
  FSDPD_RETURN_IF_ERROR(context.Finish());
  std::memset(sync->mapped, 0, 8);  // host-coherent: the submit below makes it visible
  const uint32_t push[3] = {barriers, expected_groups, spin_limit};
  const auto start = std::chrono::steady_clock::now();
  FSDPD_RETURN_IF_ERROR(context.Dispatch(pipeline.get(), {sync.get()}, push, groups, 1));
  FSDPD_RETURN_IF_ERROR(context.Finish());
  GridBarrierRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto* words = static_cast<const uint32_t*>(sync->mapped);
  run.arrivals = words[0];
  run.timed_out = words[1] != 0;
  return run;
}

absl::StatusOr<double> GridBarrierMicroseconds(VulkanContext& context, uint32_t groups,
                                               int barriers) {
  if (barriers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a barrier or more; got ", barriers));
  }
  // The best of three runs at `count` barriers, after one run untimed (the pipeline's first).
  auto best = [&](uint32_t count) -> absl::StatusOr<double> {
    double fastest = std::numeric_limits<double>::infinity();
    for (int run = 0; run < 4; ++run) {
      FSDPD_ASSIGN_OR_RETURN(const GridBarrierRun done,
                             RunGridBarriers(context, groups, groups, count, kGridSpinLimit));
      FSDPD_RETURN_IF_ERROR(
          GridBarrierOutcome(groups, done.arrivals, done.timed_out, uint64_t{groups} * count));
      if (run > 0) fastest = std::min(fastest, done.seconds);
    }
    return fastest;
  };
  const auto count = static_cast<uint32_t>(barriers);
  FSDPD_ASSIGN_OR_RETURN(const double once, best(count));
  FSDPD_ASSIGN_OR_RETURN(const double twice, best(2 * count));
  return (twice - once) / barriers * 1e6;
}

}  // namespace fsdpd::edge
