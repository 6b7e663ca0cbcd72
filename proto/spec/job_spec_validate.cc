// Checks of a job spec against the model semantics and the limits of one coordinator, and the
// figures derived from a spec (parameter count, FLOPs per token, device bytes per rank).
#include <algorithm>
#include <cmath>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/spec/job_spec.h"

namespace fsdpd {
namespace {

// Limits that keep a spec within what one coordinator and its workers can hold. A spec
// beyond them is a typo or an attack, not a job.
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxSeqLen = 1 << 20;
constexpr int64_t kMaxBatch = 1 << 16;
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr int kMaxWorldSize = 65536;
constexpr size_t kMaxNameLength = 128;
constexpr size_t kMaxPathLength = 4096;

bool Finite(double value) { return std::isfinite(value); }

}  // namespace

std::vector<FieldError> ValidateJobSpec(const v1::JobSpec& spec) {
  std::vector<FieldError> errors;
  auto fail = [&errors](std::string field, std::string message) {
    errors.push_back({std::move(field), std::move(message)});
  };
  auto in_range = [&fail](const std::string& field, int64_t value, int64_t low, int64_t high) {
    if (value < low || value > high) {
      fail(field, absl::StrCat("must be between ", low, " and ", high, " (got ", value, ")"));
      return false;
    }
    return true;
  };

  static const std::regex kNamePattern("[A-Za-z0-9][A-Za-z0-9._-]*");
  if (spec.name().empty()) {
    fail("name", "is required");
  } else if (spec.name().size() > kMaxNameLength) {
    fail("name", absl::StrCat("must be at most ", kMaxNameLength, " characters"));
  } else if (!std::regex_match(spec.name(), kNamePattern)) {
    fail("name",
         "may hold only letters, digits, '.', '_' and '-', and must start with a "
         "letter or digit (got '" +
             spec.name() + "')");
  }

  const v1::ModelSpec& model = spec.model();
  in_range("model.vocab", model.vocab(), 2, kMaxVocab);
  bool dim_ok = in_range("model.dim", model.dim(), 1, kMaxDim);
  in_range("model.layers", model.layers(), 1, kMaxLayers);
  bool heads_ok = in_range("model.heads", model.heads(), 1, kMaxDim);
  in_range("model.ffn_mult", model.ffn_mult(), 1, 64);
  if (dim_ok && heads_ok) {
    if (model.dim() % model.heads() != 0) {
      fail("model.dim", absl::StrCat("must be divisible by model.heads (got ", model.dim(), " and ",
                                     model.heads(), ")"));
    } else if (model.dim() / model.heads() > kMaxHeadDim) {
      fail("model.heads", absl::StrCat("head_dim = dim / heads must be at most ", kMaxHeadDim,
                                       " (got ", model.dim() / model.heads(), ")"));
    } else if (spec.parallel().device() == "cuda" && model.dim() / model.heads() > 128) {
      fail("model.heads", absl::StrCat("the cuda attention kernels support head_dim up to 128 "
                                       "(got ",
                                       model.dim() / model.heads(), ")"));
    }
  }
  if (!Finite(model.norm_eps()) || model.norm_eps() < 0 || model.norm_eps() > 1) {
    fail("model.norm_eps", "must be between 0 (the dtype's machine epsilon) and 1");
  }

  const v1::DataSpec& data = spec.data();
  static const std::set<std::string> kSources = {"synthetic", "tokens", "text"};
  if (!kSources.count(data.source())) {
    fail("data.source", "must be one of synthetic, tokens, text (got '" + data.source() + "')");
  } else if (data.source() != "synthetic" && data.path().empty()) {
    fail("data.path", "is required when data.source is " + data.source());
  }
  if (data.path().size() > kMaxPathLength) {
    fail("data.path", absl::StrCat("must be at most ", kMaxPathLength, " characters"));
  }
  in_range("data.seq_len", data.seq_len(), 1, kMaxSeqLen);
  if (data.token_bytes() != 2 && data.token_bytes() != 4) {
    fail("data.token_bytes",
         absl::StrCat("must be 2 (uint16) or 4 (uint32) (got ", data.token_bytes(), ")"));
  } else if (data.source() == "tokens" && data.token_bytes() == 2 && model.vocab() > 65536) {
    fail("data.token_bytes", "uint16 tokens cannot address a vocab above 65536; use 4");
  }
  if (data.source() == "text" && model.vocab() < 256) {
    fail("model.vocab", absl::StrCat("the byte-level text tokenizer needs vocab >= 256 (got ",
                                     model.vocab(), ")"));
  }

  const v1::TrainSpec& train = spec.train();
  in_range("train.batch_size", train.batch_size(), 1, kMaxBatch);
  in_range("train.steps", train.steps(), 1, kMaxSteps);
  if (!Finite(train.lr()) || train.lr() <= 0 || train.lr() > 10) {
    fail("train.lr", absl::StrCat("must be a number in (0, 10] (got ", train.lr(), ")"));
  }
  if (!Finite(train.weight_decay()) || train.weight_decay() < 0) {
    fail("train.weight_decay", "must be a non-negative number");
  }
  for (auto [field, beta] : {std::pair<const char*, double>{"train.betas[0]", train.beta1()},
                             {"train.betas[1]", train.beta2()}}) {
    if (!Finite(beta) || beta < 0 || beta >= 1) {
      fail(field, absl::StrCat("must be in [0, 1) (got ", beta, ")"));
    }
  }
  if (!Finite(train.eps()) || train.eps() <= 0) fail("train.eps", "must be a positive number");
  if (!Finite(train.grad_clip()) || train.grad_clip() < 0) {
    fail("train.grad_clip", "must be 0 (off) or a positive number");
  }
  if (train.lr_schedule() != "constant" && train.lr_schedule() != "cosine") {
    fail("train.lr_schedule", "must be constant or cosine (got '" + train.lr_schedule() + "')");
  }
  if (train.warmup_steps() < 0 || train.warmup_steps() > train.steps()) {
    fail("train.warmup_steps", "must be between 0 and train.steps");
  }
  if (!Finite(train.min_lr_ratio()) || train.min_lr_ratio() < 0 || train.min_lr_ratio() > 1) {
    fail("train.min_lr_ratio", "must be in [0, 1]");
  }

  const v1::ParallelSpec& parallel = spec.parallel();
  in_range("parallel.world_size", parallel.world_size(), 1, kMaxWorldSize);
  if (parallel.device() != "cpu" && parallel.device() != "cuda") {
    fail("parallel.device", "must be cpu or cuda (got '" + parallel.device() + "')");
  }
  if (parallel.param_dtype() != "bf16" && parallel.param_dtype() != "fp32") {
    fail("parallel.param_dtype", "must be bf16 or fp32 (got '" + parallel.param_dtype() + "')");
  }
  if (parallel.reduce_dtype() != "fp32") {
    fail("parallel.reduce_dtype", "must be fp32, the only reduction dtype supported (got '" +
                                      parallel.reduce_dtype() + "')");
  }
  const std::string& recompute = parallel.activation_recompute();
  if (!recompute.empty() && recompute != "none" && recompute != "ffn" && recompute != "block") {
    fail("parallel.activation_recompute", "must be none, ffn or block (got '" + recompute + "')");
  }

  const v1::CheckpointSpec& checkpoint = spec.checkpoint();
  in_range("checkpoint.every_steps", checkpoint.every_steps(), 0, kMaxSteps);
  in_range("checkpoint.keep", checkpoint.keep(), 1, 1000);
  if (checkpoint.init_from().size() > kMaxPathLength) {
    fail("checkpoint.init_from", absl::StrCat("must be at most ", kMaxPathLength, " characters"));
  }
  in_range("profile.start_step", spec.profile().start_step(), 0, kMaxSteps);
  in_range("profile.steps", spec.profile().steps(), 0, 1000);
  in_range("max_restarts", spec.max_restarts(), 0, 100);
  in_range("priority", spec.priority(), -1000, 1000);
  return errors;
}

std::string FormatFieldErrors(const std::vector<FieldError>& errors) {
  std::vector<std::string> parts;
  for (const FieldError& error : errors) parts.push_back(error.field + ": " + error.message);
  return absl::StrJoin(parts, "; ");
}

int64_t ParameterCount(const v1::ModelSpec& model) {
  const int64_t d = model.dim();
  const int64_t f = model.ffn_mult() * d;
  const int64_t per_block = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * f;
  return 2 * model.vocab() * d + model.layers() * per_block + (model.final_norm() ? d : 0);
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
  return sharded_state + unsharded + activations;
}

}  // namespace fsdpd
