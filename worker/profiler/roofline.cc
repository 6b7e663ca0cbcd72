#include "worker/profiler/roofline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "worker/profiler/profile_event.h"

namespace fsdpd {

Verdict ClassifyThroughput(double sm_ratio, double dram_ratio) {
  if (sm_ratio < kMemoryBoundMaxSmRatio && dram_ratio > kMemoryBoundMinDramRatio) {
    return Verdict::kMemoryBound;
  }
  if (sm_ratio > kComputeBoundMinSmRatio && dram_ratio < kComputeBoundMaxDramRatio) {
    return Verdict::kComputeBound;
  }
  return Verdict::kLatencyOrMixed;
}

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kMemoryBound:
      return "memory-bound";
    case Verdict::kComputeBound:
      return "compute-bound";
    case Verdict::kLatencyOrMixed:
      return "latency-or-mixed";
  }
  return "latency-or-mixed";
}

const char* VerdictRemedy(Verdict verdict) {
  switch (verdict) {
    case Verdict::kMemoryBound:
      return "kernel fusion (Triton / torch.compile), quantisation (FP8/INT4), or a larger batch";
    case Verdict::kComputeBound:
      return "lower precision (FP8/NVFP4), Tensor Core tile alignment (multiples of 64/128), or "
             "a bigger GPU";
    case Verdict::kLatencyOrMixed:
      return "fuse small kernels to cut launch overhead, raise occupancy with a larger batch or "
             "sequence, and overlap the kernel with communication";
  }
  return "";
}

const char* CommunicationRemedy() {
  return "overlap it with compute (prefetch the next unit's all-gather), or move fewer bytes "
         "(bf16 parameters, fewer and larger FSDP units)";
}

namespace {

double Ratio(double achieved, double peak) { return std::clamp(achieved / peak, 0.0, 1.0); }

}  // namespace

void ApplyAnalyticRoofline(const RooflinePeaks& peaks, v1::KernelStat* row) {
  row->set_tensor_pipe_ratio(-1.0);
  const bool known = row->flops() >= 0.0 && row->bytes() >= 0.0 && row->total_seconds() > 0.0 &&
                     peaks.flops_per_second > 0.0 && peaks.bytes_per_second > 0.0;
  if (!known) {
    row->set_sm_throughput_ratio(-1.0);
    row->set_dram_throughput_ratio(-1.0);
    row->set_memory_throughput_ratio(-1.0);
    row->clear_verdict();
    row->set_remedy(row->phase() == kPhaseComm ? CommunicationRemedy() : "");
    row->set_source(kSourceHostTimer);
    return;
  }
  row->set_sm_throughput_ratio(Ratio(row->flops() / row->total_seconds(), peaks.flops_per_second));
  row->set_dram_throughput_ratio(
      Ratio(row->bytes() / row->total_seconds(), peaks.bytes_per_second));
  row->set_memory_throughput_ratio(row->dram_throughput_ratio());
  row->set_source(kSourceAnalytic);
  ApplyVerdict(row);
}

void ApplyVerdict(v1::KernelStat* row) {
  if (row->sm_throughput_ratio() < 0.0 || row->dram_throughput_ratio() < 0.0) {
    row->clear_verdict();
    row->set_remedy(row->phase() == kPhaseComm ? CommunicationRemedy() : "");
    return;
  }
  const Verdict verdict =
      ClassifyThroughput(row->sm_throughput_ratio(), row->dram_throughput_ratio());
  row->set_verdict(VerdictName(verdict));
  row->set_remedy(VerdictRemedy(verdict));
}

absl::StatusOr<double> MeasureHostMemoryBandwidth() {
  // 64 MiB is beyond the last-level cache of any current server CPU, so the copy streams DRAM.
  constexpr size_t kBytes = size_t{64} << 20;
  std::unique_ptr<char[]> source(new (std::nothrow) char[kBytes]);
  std::unique_ptr<char[]> destination(new (std::nothrow) char[kBytes]);
  if (source == nullptr || destination == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate 2 × ", kBytes, " bytes to measure the memory bandwidth"));
  }
  // Touch both first so the timed copies measure bandwidth, not page faults.
  std::memset(source.get(), 1, kBytes);
  std::memset(destination.get(), 0, kBytes);
  double best_seconds = 1e30;
  for (int repeat = 0; repeat < 3; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(destination.get(), source.get(), kBytes);
    const auto end = std::chrono::steady_clock::now();
    best_seconds = std::min(best_seconds, std::chrono::duration<double>(end - start).count());
  }
  // Keep the copy observable so it cannot be elided.
  if (destination[kBytes - 1] != 1) {
    return absl::InternalError("the bandwidth measurement's copy went wrong");
  }
  return 2.0 * static_cast<double>(kBytes) / std::max(best_seconds, 1e-9);
}

}  // namespace fsdpd
