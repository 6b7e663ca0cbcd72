// Small pieces of the trainer: host values through device collectives, the CPU's peak FLOP/s
// for MFU, and the communicator timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"

namespace fsdpd {

// All-reduces host values: collectives work on device memory, so they take a round trip
// through a device buffer. Collective.
absl::Status AllReduceHostFloats(Communicator& communicator, Backend& backend,
                                 std::vector<float>* values, ReduceOp op);
absl::Status AllReduceHostInts(Communicator& communicator, Backend& backend,
                               std::vector<int32_t>* values, ReduceOp op);

// The FLOP/s that MFU is measured against, per rank. FSDPD_PEAK_FLOPS (a number, FLOP/s) sets it;
// otherwise, on the CPU backend, it is measured once: the best of a few 512×512×512 fp32
// matrix products through the backend's own LinearForward, i.e. what this rank's BLAS achieves.
absl::StatusOr<double> PeakFlopsPerRank(Backend& backend);

// Memory as the driver or the OS sees it (StepReport.memory_device_used_*).
struct MemoryInUse {
  int64_t bytes = 0;  // 0: unknown
  std::string source;
};
// For a rank on `device`: on cuda:N the device memory this process holds (NVML, loaded at run
// time when the driver has it) or else the device's total − free; on the CPU the resident set
// size from /proc/self/statm. Never fails: an unknown figure is 0 with an empty source.
MemoryInUse RankMemoryInUse(const std::string& device);

// FSDPD_COMM_TIMEOUT_SECONDS, or 60 s: how long a collective may wait on a peer.
std::chrono::milliseconds CommunicatorTimeout();

}  // namespace fsdpd
