// Sharded checkpoints of the FSDP state: each rank saves its own slices (master, AdamW moments)
// and rank 0 commits once every rank's file is durable; resuming picks the newest checkpoint
// that verifies on every rank, so one corrupt shard makes all ranks fall back together.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"
#include "worker/fsdp/fsdp_state.h"

namespace fsdpd {

using EngineLog = std::function<void(const std::string& level, const std::string& text)>;

// Collective. Returns the step to continue after (0 when no usable checkpoint exists) and
// leaves the state loaded from it.
absl::StatusOr<int64_t> ResumeFromCheckpoint(const std::string& job_dir, FsdpState& state,
                                             Communicator& communicator, Backend& backend,
                                             const EngineLog& log);

// Collective. Every rank writes its file; if any rank failed, every rank returns the error
// (the previous checkpoint stays intact). Then rank 0 commits and prunes to `keep`.
absl::Status SaveCheckpoint(const std::string& job_dir, int64_t step, int keep, FsdpState& state,
                            Communicator& communicator, Backend& backend);

}  // namespace fsdpd
