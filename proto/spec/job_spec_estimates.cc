// The figures derived from a spec: parameter count, FLOPs per token and device bytes per rank.
#include <algorithm>
#include <string>

#include "proto/spec/job_spec.h"

namespace fsdpd {

int64_t ParameterCount(const v1::ModelSpec& model) {
  const int64_t d = model.dim();
  const int64_t f = model.ffn_mult() * d;
  const int64_t per_block = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * f;
  return 2 * model.vocab() * d + model.layers() * per_block + (model.final_norm() ? d : 0);
}

int64_t ExportedModelBytesLimit(const v1::ModelSpec& model) {
  const int64_t tensors = 8 * model.layers() + 2 + (model.final_norm() ? 1 : 0);
  return 8 + (64 << 10) + 256 * tensors + 4 * ParameterCount(model);
}

double FlopsPerToken(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  return 6.0 * static_cast<double>(ParameterCount(model)) +
         12.0 * static_cast<double>(model.layers()) * static_cast<double>(spec.data().seq_len()) *
             static_cast<double>(model.dim());
}

double EstimateRankDeviceBytes(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  const double world = std::max(1, spec.parallel().world_size());
  const double params = static_cast<double>(ParameterCount(model));
  const double d = model.dim(), f = model.ffn_mult() * d, v = model.vocab();
  const double param_bytes = spec.parallel().param_dtype() == "bf16" ? 2 : 4;
  const double activation_bytes = spec.parallel().device() == "cuda" ? 2 : 4;
  // Unsharded params and grads of the largest unit, twice for prefetch.
  const double block = 4 * d * d + 2 * d * f;
  const double largest_unit = std::max(block, 2 * v * d);
  const double unsharded = 2 * largest_unit * (param_bytes + 4);
  // fp32 master and AdamW m and v, sharded. Without clipping the optimizer runs in backward and
  // only the gradient shards of the units in flight (two) exist; with it, the whole one does.
  const double gradient_shards =
      spec.train().grad_clip() > 0 ? 4.0 * params / world : 2 * 4.0 * largest_unit / world;
  const double sharded_state = 12.0 * params / world + gradient_shards;
  // Gradient accumulation keeps every unit's unsharded fp32 gradient between micro-batches.
  const double accumulators = spec.train().grad_accum_steps() > 1 ? 4.0 * params : 0.0;
  // Activations per token per block: residuals, norms, qkv, attention out, ffn hidden ×2 (a
  // generous count of what a block keeps and its backward's workspace). Recompute keeps less:
  // ffn drops ffn.0's output; block keeps only each block's input, and one block's worth once.
  const double tokens = static_cast<double>(spec.train().batch_size()) * spec.data().seq_len();
  const double per_token_block = (4 * d + 3 * d + d + 2 * f) * activation_bytes;
  const std::string& recompute = spec.parallel().activation_recompute();
  double kept_per_token = model.layers() * per_token_block;
  if (recompute == "ffn") kept_per_token -= model.layers() * f * activation_bytes;
  if (recompute == "block")
    kept_per_token = model.layers() * d * activation_bytes + per_token_block;
  const double activations = tokens * (kept_per_token + 2 * d * 4);
  return sharded_state + accumulators + unsharded + activations;
}

}  // namespace fsdpd
