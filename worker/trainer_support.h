// Small pieces of the trainer: host values through device collectives, and the communicator
// timeout.
#pragma once

#include <chrono>
#include <cstdint>
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

// FSDPD_COMM_TIMEOUT_SECONDS, or 60 s: how long a collective may wait on a peer. A value that is
// not a positive number is an error.
absl::StatusOr<std::chrono::milliseconds> CommunicatorTimeout();

// Where the optimizer in backward runs: on the compute stream (the default), or on the comm
// stream beside backward's compute when FSDPD_OPTIMIZER_STREAM=comm. On the H200 the comm-stream
// kernels hold every SM while they run, so the compute stream waits for them and the step is no
// faster (bench/RESULTS.md, "The optimizer on the comm stream"); the option stays for the stream
// priorities that would let compute go first. Another value than compute or comm is an error,
// and so is FSDPD_OPTIMIZER_SMS (CudaBackendConfig::optimizer_sms) without the comm stream.
absl::StatusOr<bool> OptimizerOnCommStream();

// FsdpOptions::split_master for bf16 parameters: on (the default) unless
// FSDPD_MASTER_LAYOUT=fp32, which keeps the plain fp32 master and casts it at every gather (the
// layout before the split, kept for comparison: bench/RESULTS.md). Another value is an error.
absl::StatusOr<bool> SplitMaster();

// FsdpOptions::prefetch_units from FSDPD_PREFETCH_UNITS (1, 2 or 3; unset: 1).
absl::StatusOr<int> PrefetchUnits();

}  // namespace fsdpd
