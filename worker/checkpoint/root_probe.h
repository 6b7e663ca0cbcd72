// A worker's checkpoint root: whether it can write it, which root it is, and the one error that
// says a job's ranks do not share it.
//
// Every job writes its folder, its checkpoints and rank 0's exported model under the root, so a
// worker that cannot write it is unfit for every job: the fault lies with the worker's storage,
// not with a job. The worker probes at start and again after an attempt fails, and reports the
// answer to the coordinator (WorkerHealth.checkpoint_root_error), which then gives it no job.
//
// The ranks of one job must see each other's files: rank 0 commits a checkpoint only once it
// finds every rank's file, and every rank reads the same manifest to resume. The root's identity
// (WorkerHealth.checkpoint_root_id) is a marker file in the root, made by the first worker that
// finds none: workers that mount one shared root read the same identity, workers with roots of
// their own read different ones, and the coordinator places a job's ranks only on workers that
// report one identity (server/scheduler.h).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fsdpd {

// The marker's name in the root.
inline constexpr char kRootIdentityFile[] = ".fsdpd-root-id";

// Creates `root` (and its parents) if needed, then creates, writes, closes and removes a probe
// file in it. UNAVAILABLE names the root and the system's reason ("Read-only file system",
// "Permission denied", "No space left on device") when any of that fails.
absl::Status ProbeCheckpointRoot(const std::string& root);

// The root's identity: the marker's content, a random 128-bit hex string that the first caller
// writes (to a temporary name, then linked into place, so that concurrent workers on one shared
// root agree on one identity). UNAVAILABLE names the root and the reason when the marker can be
// neither made nor read; DATA_LOSS when it holds something else than an identity.
absl::StatusOr<std::string> ReadOrCreateRootIdentity(const std::string& root);

// FAILED_PRECONDITION (a fault no retry can fix): `what` (the missing shard or checkpoint), then
// the remedy, a checkpoint root shared by every worker that runs the job.
absl::Status CheckpointRootNotShared(absl::string_view what);

}  // namespace fsdpd
