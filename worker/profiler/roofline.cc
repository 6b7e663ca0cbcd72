#include "worker/profiler/roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/elementwise.h"
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

double PeakFlopsFor(const RooflinePeaks& peaks, const std::string& op_name) {
  const bool fp8 = absl::StartsWith(op_name, "fp8_");
  return fp8 && peaks.fp8_flops_per_second > 0.0 ? peaks.fp8_flops_per_second
                                                 : peaks.flops_per_second;
}

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
  row->set_sm_throughput_ratio(
      Ratio(row->flops() / row->total_seconds(), PeakFlopsFor(peaks, row->name())));
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
  // Working sets from one that stays in the first-level cache to one far beyond the last level
  // (64 MiB), each streamed until at least 16 MiB have moved, best of three; the fastest rate is
  // the roof. Two patterns: a copy (one read, one write) and the CPU backend's own elementwise
  // add (two reads, one write), which a core sustains faster than a copy while in cache.
  constexpr size_t kLargest = size_t{64} << 20;
  constexpr size_t kSizes[] = {size_t{16} << 10, size_t{128} << 10, size_t{1} << 20,
                               size_t{8} << 20, kLargest};
  constexpr size_t kFloats = kLargest / sizeof(float);
  std::unique_ptr<float[]> a(new (std::nothrow) float[kFloats]);
  std::unique_ptr<float[]> b(new (std::nothrow) float[kFloats]);
  std::unique_ptr<float[]> out(new (std::nothrow) float[kFloats]);
  if (a == nullptr || b == nullptr || out == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate 3 × ", kLargest, " bytes to measure the memory bandwidth"));
  }
  // Touch them first so the timed passes measure bandwidth, not page faults.
  std::fill_n(a.get(), kFloats, 1.0f);
  std::fill_n(b.get(), kFloats, 2.0f);
  std::fill_n(out.get(), kFloats, 0.0f);
  double best_rate = 0.0;
  for (const bool add : {false, true}) {
    for (const size_t bytes : kSizes) {
      const size_t passes = std::max<size_t>(1, (size_t{16} << 20) / bytes);
      const int64_t count = static_cast<int64_t>(bytes / sizeof(float));
      for (int repeat = 0; repeat < 3; ++repeat) {
        const auto start = std::chrono::steady_clock::now();
        for (size_t pass = 0; pass < passes; ++pass) {
          if (add) {
            cpu::Add(a.get(), b.get(), count, out.get());
          } else {
            std::memcpy(out.get(), a.get(), bytes);
          }
          // Each pass is observable: the compiler may not merge or drop the repeats.
          asm volatile("" : : "r"(out.get()) : "memory");
        }
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double moved = static_cast<double>(bytes * passes) * (add ? 3.0 : 2.0);
        best_rate = std::max(best_rate, moved / std::max(seconds, 1e-9));
      }
    }
  }
  if (out[0] != 3.0f || out[kFloats - 1] != 3.0f) {
    return absl::InternalError("the bandwidth measurement's passes went wrong");
  }
  return best_rate;
}

}  // namespace fsdpd
