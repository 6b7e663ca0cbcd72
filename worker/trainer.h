// The entry point of the training engine: runs one rank of one attempt of a job to the end.
// The worker's session calls it on a thread of its own; the engine's tests call it directly.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdpd/v1/spec.pb.h"
#include "worker/rank_context.h"

namespace fsdpd {

struct TrainResult {
  int64_t final_step = 0;
  double final_loss = 0.0;
  // On rank 0 of a successful run: the consolidated safetensors file with PyTorch's names.
  std::string exported_model_path;
};

// Runs the job to its last step, resuming from the latest complete checkpoint in
// context.checkpoint_dir if there is one. Returns CANCELLED when hooks.cancelled was set.
absl::StatusOr<TrainResult> RunTrainer(const v1::JobSpec& spec, const RankContext& context,
                                       const TrainerHooks& hooks);

}  // namespace fsdpd
