// The speed-of-light verdict of docs/profiling.md, in one place for every backend: thresholds,
// verdicts and remedies, and the analytic roofline used where hardware counters cannot be
// read (the CPU backend, or a GPU without counter permission). The CUPTI path fills the
// ratios from counters and reuses ClassifyThroughput and the remedies.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "fsdpd/v1/profile.pb.h"

namespace fsdpd {

// docs/profiling.md: memory-bound when SM < 25 % and HBM > 75 % of peak; compute-bound when
// SM > 75 % and HBM < 50 %; anything else is latency-bound or mixed. Comparisons are strict.
inline constexpr double kMemoryBoundMaxSmRatio = 0.25;
inline constexpr double kMemoryBoundMinDramRatio = 0.75;
inline constexpr double kComputeBoundMinSmRatio = 0.75;
inline constexpr double kComputeBoundMaxDramRatio = 0.50;

enum class Verdict { kMemoryBound, kComputeBound, kLatencyOrMixed };

Verdict ClassifyThroughput(double sm_ratio, double dram_ratio);
// "memory-bound", "compute-bound", "latency-or-mixed" (KernelStat.verdict).
const char* VerdictName(Verdict verdict);
// The seed's remedy for memory- and compute-bound kernels; ours for the rest.
const char* VerdictRemedy(Verdict verdict);
// What to do about time in collectives, which have no compute/memory verdict.
const char* CommunicationRemedy();

// KernelStat.source values.
inline constexpr char kSourceCupti[] = "cupti";
inline constexpr char kSourceHostTimer[] = "host-timer";
inline constexpr char kSourceAnalytic[] = "analytic-estimate";
// Times from device activity records, no throughput ratios (a collective, an unknown cost).
inline constexpr char kSourceDeviceActivity[] = "cupti-activity";

// The peaks an analytic roofline compares against, per rank.
struct RooflinePeaks {
  double flops_per_second = 0.0;
  double bytes_per_second = 0.0;
  // The ops that run on FP8 tensor cores (named fp8_*: Ops::Fp8LinearForward/Backward) reach
  // twice the dense bf16 rate on Ada, Hopper and Blackwell; 0 where they do not (the CPU backend
  // emulates them in fp32): they are then held to flops_per_second like every other op.
  double fp8_flops_per_second = 0.0;
};

// The FLOP/s peak a row's op is held to: fp8_flops_per_second for fp8_* ops where it is known.
double PeakFlopsFor(const RooflinePeaks& peaks, const std::string& op_name);

// Fills a row's throughput ratios, verdict, remedy and source from its flops, bytes and
// total_seconds against `peaks`: ratio = achieved rate / peak, clamped to [0, 1] (timer noise
// can put a short op a little past a peak). memory_throughput_ratio equals the DRAM one (the
// estimate cannot tell cache levels apart) and tensor_pipe_ratio is -1 (no counter for it). A row
// whose cost is unknown (flops and bytes < 0, e.g. a collective) or whose peaks are unknown keeps
// ratios of -1, no verdict, and source "host-timer".
void ApplyAnalyticRoofline(const RooflinePeaks& peaks, v1::KernelStat* row);

// Sets verdict and remedy from ratios already filled in (hardware counters).
void ApplyVerdict(v1::KernelStat* row);

// This host's peak memory bandwidth in bytes/s, every byte read or written counted: the best
// rate of a copy and of the CPU backend's elementwise add over working sets from first-level-
// cache size to far beyond the last-level cache (64 MiB). A roof is an upper bound, as the
// compute roof (the best GEMM rate) is: a CPU op's operands are often cache-resident, and against
// a DRAM copy rate alone such ops sat above the roof. About 0.1 s; once per profiled run.
absl::StatusOr<double> MeasureHostMemoryBandwidth();

}  // namespace fsdpd
