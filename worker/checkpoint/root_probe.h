// Whether this worker can write its checkpoint root. Every job writes there (its folder, its
// checkpoints, rank 0's exported model), so a worker that cannot is unfit for every job: the
// fault lies with the worker's storage, not with a job. The worker probes at start and again
// after an attempt fails, and reports the answer to the coordinator
// (WorkerHealth.checkpoint_root_error), which then gives it no job.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace fsdpd {

// Creates `root` (and its parents) if needed, then creates, writes, closes and removes a probe
// file in it. UNAVAILABLE names the root and the system's reason ("Read-only file system",
// "Permission denied", "No space left on device") when any of that fails.
absl::Status ProbeCheckpointRoot(const std::string& root);

}  // namespace fsdpd
