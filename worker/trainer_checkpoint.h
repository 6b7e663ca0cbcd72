// Sharded checkpoints of the FSDP state: each rank saves its own slices (master, AdamW moments)
// and rank 0 commits once every rank's file is durable; resuming picks the newest checkpoint
// that verifies on every rank, so one corrupt shard makes all ranks fall back together.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "fsdpd/v1/spec.pb.h"
#include "fsdpd/v1/worker.pb.h"
#include "worker/backend/backend.h"
#include "worker/checkpoint/checkpoint.h"
#include "worker/comm/communicator.h"
#include "worker/fsdp/fsdp_state.h"

namespace fsdpd {

using EngineLog = std::function<void(const std::string& level, const std::string& text)>;

// This run's identity for its manifests: the job's unique id (empty for fsdpd-train), the
// attempt, and the fingerprint of what a checkpoint must match to be loaded.
CheckpointIdentity CheckpointIdentityFor(const v1::JobSpec& spec, const std::string& job_uid,
                                         int attempt, int world_size);

// OK when a checkpoint recorded as `found` may be resumed by the run `expected`; otherwise
// FAILED_PRECONDITION naming what differs. A checkpoint of another job (or with no job
// recorded, when this run has one) is refused: checkpoint.init_from starts from other weights.
absl::Status CheckResumable(const CheckpointIdentity& found, const CheckpointIdentity& expected,
                            const std::string& job_dir, int64_t step);

// Collective. Returns the step to continue after (0 when no usable checkpoint exists) and
// leaves the state loaded from it.
// A committed checkpoint that this run may not resume (CheckResumable) fails the run.
absl::StatusOr<int64_t> ResumeFromCheckpoint(const std::string& job_dir,
                                             const CheckpointIdentity& identity, FsdpState& state,
                                             Communicator& communicator, Backend& backend,
                                             const EngineLog& log);

// Collective. Every rank writes its file; if any rank failed, every rank returns the error
// (the previous checkpoint stays intact). Then rank 0 commits and prunes to `keep`. A rank
// whose `cancelled` becomes true stops writing between buffers (and the cancellation aborts the
// communicator, so the others stop at the next collective).
absl::Status SaveCheckpoint(const std::string& job_dir, const CheckpointIdentity& identity,
                            int64_t step, int keep, FsdpState& state, Communicator& communicator,
                            Backend& backend, const std::atomic<bool>* cancelled = nullptr);

// Rank 0, after SaveCheckpoint: what the coordinator records of committed `step` (its size on
// disk, the world size, now, and every step still committed after pruning, newest first). The
// job and attempt fields are left empty.
absl::StatusOr<v1::CheckpointCommitted> DescribeCommittedCheckpoint(const std::string& job_dir,
                                                                    int64_t step, int world_size);

}  // namespace fsdpd
