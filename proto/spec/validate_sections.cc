// ValidateJobSpec, and the section validators of spec_validate.h for the name, the model, the
// data, training, the checkpoint and the job's policy. The device rules are in
// validate_parallel.cc, the path fields' syntax in spec_paths.cc.
#include <cmath>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/spec/job_spec.h"
#include "proto/spec/spec_path_fields.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {
namespace {

bool Finite(double value) { return std::isfinite(value); }

void MaxLength(const std::string& field, const std::string& value, size_t limit,
               FieldErrors& errors) {
  if (value.size() > limit) {
    errors.Fail(field,
                absl::StrCat("must be at most ", limit, " characters (got ", value.size(), ")"));
  }
}

// llama's fields: kv_heads dividing heads, an even head_dim (rotary rotates pairs), a positive
// rotary base and a SwiGLU width in range. `shape_ok`: dim and heads passed their own rules.
void ValidateLlama(const v1::ModelSpec& model, bool shape_ok, FieldErrors& errors) {
  if (errors.InRange("model.kv_heads", model.kv_heads(), 0, SpecLimits::kMaxDim) &&
      model.kv_heads() > 0 && model.heads() > 0 && model.heads() % model.kv_heads() != 0) {
    errors.Fail(
        "model.kv_heads",
        absl::StrCat("model.heads must be divisible by model.kv_heads (got ", model.heads(),
                     " and ", model.kv_heads(), "); 0 or heads gives multi-head attention"));
  }
  if (shape_ok && (model.dim() / model.heads()) % 2 != 0) {
    errors.Fail("model.heads",
                absl::StrCat("head_dim = dim / heads must be even for rotary positions (got ",
                             model.dim() / model.heads(), ")"));
  }
  if (!Finite(model.rope_theta()) || model.rope_theta() <= 1 || model.rope_theta() > 1e12) {
    errors.Fail("model.rope_theta",
                absl::StrCat("must be a number in (1, 1e12] (got ", model.rope_theta(), ")"));
  }
  errors.InRange("model.ffn_dim", model.ffn_dim(), 0, 64 * SpecLimits::kMaxDim);
}

// A minillm spec (arch minillm, or empty as in a spec before defaults) that sets one of llama's
// fields is a mistake worth naming.
void RefuseLlamaFields(const v1::ModelSpec& model, FieldErrors& errors) {
  const char* kOnlyLlama = "applies only to model.arch: llama (this spec's arch is minillm)";
  if (model.kv_heads() != 0) errors.Fail("model.kv_heads", kOnlyLlama);
  if (model.ffn_dim() != 0) errors.Fail("model.ffn_dim", kOnlyLlama);
  if (model.has_rope_theta() && model.rope_theta() != 10000) {
    errors.Fail("model.rope_theta", kOnlyLlama);
  }
  if (model.tie_embeddings()) errors.Fail("model.tie_embeddings", kOnlyLlama);
}

}  // namespace

void ValidateStringLengths(const v1::JobSpec& spec, FieldErrors& errors) {
  MaxLength("name", spec.name(), SpecLimits::kMaxNameLength, errors);
  for (const SpecPathField& field : SpecPathFields()) {
    MaxLength(field.name(), field.Get(spec), SpecLimits::kMaxPathLength, errors);
  }
  MaxLength("model.arch", spec.model().arch(), SpecLimits::kMaxKeywordLength, errors);
  MaxLength("data.source", spec.data().source(), SpecLimits::kMaxKeywordLength, errors);
  MaxLength("train.lr_schedule", spec.train().lr_schedule(), SpecLimits::kMaxKeywordLength, errors);
  MaxLength("parallel.device", spec.parallel().device(), SpecLimits::kMaxKeywordLength, errors);
  MaxLength("parallel.param_dtype", spec.parallel().param_dtype(), SpecLimits::kMaxKeywordLength,
            errors);
  MaxLength("parallel.reduce_dtype", spec.parallel().reduce_dtype(), SpecLimits::kMaxKeywordLength,
            errors);
  MaxLength("parallel.activation_recompute", spec.parallel().activation_recompute(),
            SpecLimits::kMaxKeywordLength, errors);
  MaxLength("parallel.matmul_dtype", spec.parallel().matmul_dtype(), SpecLimits::kMaxKeywordLength,
            errors);
}

void ValidateName(const v1::JobSpec& spec, FieldErrors& errors) {
  static const std::regex kNamePattern("[A-Za-z0-9][A-Za-z0-9._-]*");
  if (spec.name().empty()) {
    errors.Fail("name", "is required");
  } else if (spec.name().size() > SpecLimits::kMaxNameLength) {
    return;  // ValidateStringLengths says so
  } else if (!std::regex_match(spec.name(), kNamePattern)) {
    errors.Fail("name",
                "may hold only letters, digits, '.', '_' and '-', and must start with a letter "
                "or digit (got '" +
                    spec.name() + "')");
  }
}

void ValidateModel(const v1::ModelSpec& model, FieldErrors& errors) {
  errors.InRange("model.vocab", model.vocab(), 2, SpecLimits::kMaxVocab);
  const bool dim_ok = errors.InRange("model.dim", model.dim(), 1, SpecLimits::kMaxDim);
  errors.InRange("model.layers", model.layers(), 1, SpecLimits::kMaxLayers);
  const bool heads_ok = errors.InRange("model.heads", model.heads(), 1, SpecLimits::kMaxDim);
  errors.InRange("model.ffn_mult", model.ffn_mult(), 1, 64);
  if (dim_ok && heads_ok) {
    if (model.dim() % model.heads() != 0) {
      errors.Fail("model.dim", absl::StrCat("must be divisible by model.heads (got ", model.dim(),
                                            " and ", model.heads(), ")"));
    } else if (model.dim() / model.heads() > kMaxAttentionHeadDim) {
      errors.Fail("model.heads",
                  absl::StrCat("head_dim = dim / heads must be at most ", kMaxAttentionHeadDim,
                               " (got ", model.dim() / model.heads(), ")"));
    }
  }
  if (!Finite(model.norm_eps()) || model.norm_eps() < 0 || model.norm_eps() > 1) {
    errors.Fail("model.norm_eps", "must be between 0 (the dtype's machine epsilon) and 1");
  }
  if (model.arch() == "llama") {
    ValidateLlama(model, dim_ok && heads_ok && model.dim() % model.heads() == 0, errors);
  } else if (model.arch() == "minillm" || model.arch().empty()) {
    RefuseLlamaFields(model, errors);
  } else {
    errors.Fail("model.arch", "must be minillm or llama (got '" +
                                  model.arch().substr(0, SpecLimits::kMaxKeywordLength) + "')");
  }
}

void ValidateData(const v1::JobSpec& spec, FieldErrors& errors) {
  const v1::DataSpec& data = spec.data();
  static const std::set<std::string> kSources = {"synthetic", "tokens", "text"};
  if (!kSources.count(data.source())) {
    errors.Fail("data.source", "must be one of synthetic, tokens, text (got '" +
                                   data.source().substr(0, SpecLimits::kMaxKeywordLength) + "')");
  } else if (data.source() != "synthetic" && data.path().empty()) {
    errors.Fail("data.path", "is required when data.source is " + data.source());
  }
  errors.InRange("data.seq_len", data.seq_len(), 1, SpecLimits::kMaxSeqLen);
  if (data.token_bytes() != 2 && data.token_bytes() != 4) {
    errors.Fail("data.token_bytes",
                absl::StrCat("must be 2 (uint16) or 4 (uint32) (got ", data.token_bytes(), ")"));
  } else if (data.source() == "tokens" && data.token_bytes() == 2 && spec.model().vocab() > 65536) {
    errors.Fail("data.token_bytes", "uint16 tokens cannot address a vocab above 65536; use 4");
  }
  if (data.source() == "text" && spec.model().vocab() < 256) {
    errors.Fail("model.vocab",
                absl::StrCat("the byte-level text tokenizer needs vocab >= 256 (got ",
                             spec.model().vocab(), ")"));
  }
}

void ValidateTrain(const v1::TrainSpec& train, FieldErrors& errors) {
  errors.InRange("train.batch_size", train.batch_size(), 1, SpecLimits::kMaxBatch);
  errors.InRange("train.steps", train.steps(), 1, SpecLimits::kMaxSteps);
  if (!Finite(train.lr()) || train.lr() <= 0 || train.lr() > 10) {
    errors.Fail("train.lr", absl::StrCat("must be a number in (0, 10] (got ", train.lr(), ")"));
  }
  if (!Finite(train.weight_decay()) || train.weight_decay() < 0) {
    errors.Fail("train.weight_decay", "must be a non-negative number");
  }
  for (auto [field, beta] : {std::pair<const char*, double>{"train.beta1", train.beta1()},
                             {"train.beta2", train.beta2()}}) {
    if (!Finite(beta) || beta < 0 || beta >= 1) {
      errors.Fail(field, absl::StrCat("must be in [0, 1) (got ", beta, ")"));
    }
  }
  if (!Finite(train.eps()) || train.eps() <= 0) {
    errors.Fail("train.eps", "must be a positive number");
  }
  if (!Finite(train.grad_clip()) || train.grad_clip() < 0) {
    errors.Fail("train.grad_clip", "must be 0 (off) or a positive number");
  }
  if (train.lr_schedule() != "constant" && train.lr_schedule() != "cosine") {
    errors.Fail("train.lr_schedule",
                "must be constant or cosine (got '" +
                    train.lr_schedule().substr(0, SpecLimits::kMaxKeywordLength) + "')");
  }
  if (train.warmup_steps() < 0 || train.warmup_steps() > train.steps()) {
    errors.Fail("train.warmup_steps",
                absl::StrCat("must be between 0 and train.steps (got ", train.warmup_steps(), ")"));
  }
  if (!Finite(train.min_lr_ratio()) || train.min_lr_ratio() < 0 || train.min_lr_ratio() > 1) {
    errors.Fail("train.min_lr_ratio", "must be in [0, 1]");
  }
}

void ValidateCheckpoint(const v1::JobSpec& spec, FieldErrors& errors) {
  const v1::CheckpointSpec& checkpoint = spec.checkpoint();
  errors.InRange("checkpoint.every_steps", checkpoint.every_steps(), 0, SpecLimits::kMaxSteps);
  errors.InRange("checkpoint.keep", checkpoint.keep(), 1, 1000);
}

void ValidateProfileAndPolicy(const v1::JobSpec& spec, FieldErrors& errors) {
  errors.InRange("profile.start_step", spec.profile().start_step(), 0, SpecLimits::kMaxSteps);
  errors.InRange("profile.steps", spec.profile().steps(), 0, 1000);
  errors.InRange("max_restarts", spec.max_restarts(), 0, 100);
  errors.InRange("priority", spec.priority(), -1000, 1000);
}

// Every section validator, in the order of the spec.
std::vector<FieldError> ValidateJobSpec(const v1::JobSpec& spec) {
  FieldErrors errors;
  ValidateStringLengths(spec, errors);
  ValidateName(spec, errors);
  ValidateModel(spec.model(), errors);
  ValidateData(spec, errors);
  ValidateEval(spec, errors);
  ValidateTrain(spec.train(), errors);
  ValidateGradAccumulation(spec.train(), errors);
  ValidateParallel(spec, errors);
  ValidateCheckpoint(spec, errors);
  ValidatePaths(spec, errors);
  ValidateProfileAndPolicy(spec, errors);
  return errors.Take();
}

std::string FormatFieldErrors(const std::vector<FieldError>& errors) {
  std::vector<std::string> parts;
  for (const FieldError& error : errors) parts.push_back(error.field + ": " + error.message);
  return absl::StrJoin(parts, "; ");
}

}  // namespace fsdpd
