// What the trainer is given besides the spec: which rank of which attempt it runs, where (the
// rendezvous store, the checkpoint folder, the roots paths must stay inside, the device), and
// the hooks through which it reports steps, logs and profiles and is cancelled. RunTrainer
// (worker/trainer.h) takes both; the step and the profiling windows (worker/trainer_step.h,
// worker/trainer_profiling.h) read them.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fsdpd/v1/common.pb.h"
#include "fsdpd/v1/profile.pb.h"
#include "fsdpd/v1/worker.pb.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

struct RankContext {
  std::string job_id;
  // The job's unique id (v1::Job.uid), recorded in its checkpoints' manifests; empty when run
  // without a coordinator (fsdpd-train).
  std::string job_uid;
  int attempt = 0;
  int rank = 0;
  int world_size = 1;
  // Where this job's checkpoints live: <checkpoint_root>/<job_uid>/. All ranks of a job must
  // see the same directory (a shared filesystem across hosts).
  std::string checkpoint_dir;
  // Roots that data, init and checkpoint paths must stay inside (empty: no restriction).
  std::vector<std::string> allowed_roots;
  // Rendezvous for the collectives, already scoped to (job, attempt).
  KeyValueStore* store = nullptr;
  // The address peers reach this rank on (Gloo binds it); loopback by default.
  std::string bind_address = "127.0.0.1";
  // Bounds every collective and the rendezvous, so a dead peer fails the attempt instead of
  // hanging it; 0 means the engine default (60 s, or FSDPD_COMM_TIMEOUT_SECONDS).
  std::chrono::milliseconds collective_timeout{0};
  // cpu | cuda:N, the worker's --device: RunTrainer takes its device runtime from it
  // (worker/device/device_runtime.h), which must run the job's parallel.device.
  std::string device = "cpu";
  // Without clipping (train.grad_clip 0) each unit's AdamW update runs in backward, as soon as
  // its gradient shard is reduced, so the whole-model fp32 gradient shard never exists; the
  // weights are bit-identical to the step after backward. Tests turn it off to compare.
  bool optimizer_in_backward = true;
};

struct TrainerHooks {
  std::function<void(const v1::StepReport&)> on_step;
  std::function<void(const std::string& level, const std::string& text)> on_log;
  // Set by the session to stop the run promptly; the trainer checks it between steps
  // and aborts its collectives.
  const std::atomic<bool>* cancelled = nullptr;
  // Called with a function that aborts the run's collectives from another thread (NCCL's
  // ncclCommAbort), once the communicator exists, and with null before it goes away. A rank
  // whose peer died sits inside a collective, where `cancelled` is never read: the session calls
  // the function when the coordinator cancels the attempt. Null: not offered.
  std::function<void(std::function<void()>)> set_abort;
  // Receives each profiling window's reports (spec.profile, or a request), in order: the
  // kernel table first, then the Chrome trace in chunks, the last marked trace_last. Null: the
  // run is never profiled.
  std::function<void(const v1::ProfileReport&)> on_profile;
  // Polled once between steps for a profiling request from the coordinator. Null: none.
  std::function<std::optional<v1::ProfileRequest>()> poll_profile_request;
  // Rank 0, after each checkpoint it committed: the step, its size, the world size, when, and
  // the steps still committed after pruning (the job and attempt are left to the caller). Null:
  // not told.
  std::function<void(const v1::CheckpointCommitted&)> on_checkpoint;
};

}  // namespace fsdpd
