// The parallel section and the rules that depend on the device: what the CUDA engine cannot
// run is rejected here, at submission, instead of on a worker after scheduling.
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {
namespace {

// The CUDA engine computes with bf16 parameters (worker/trainer.cc casts the fp32 master shard
// to bf16 for the gather), and its own attention kernels bound batch·heads.
void ValidateCudaLimits(const v1::JobSpec& spec, FieldErrors& errors) {
  const v1::ParallelSpec& parallel = spec.parallel();
  if (parallel.param_dtype() == "fp32") {
    errors.Fail("parallel.param_dtype",
                "the cuda engine computes with bf16 parameters; use param_dtype: bf16 "
                "(fp32 runs on device: cpu)");
  }
  const v1::ModelSpec& model = spec.model();
  // head_dim needs no rule of its own here: kMaxAttentionHeadDim bounds it for both devices.
  const int64_t batch_heads = spec.train().batch_size() * model.heads();
  if (batch_heads > kMaxCudaAttentionBatchHeads) {
    errors.Fail("train.batch_size",
                absl::StrCat("the cuda attention kernels support batch_size · model.heads up to ",
                             kMaxCudaAttentionBatchHeads, " (got ", batch_heads, ")"));
  }
}

}  // namespace

void ValidateParallel(const v1::JobSpec& spec, FieldErrors& errors) {
  const v1::ParallelSpec& parallel = spec.parallel();
  errors.InRange("parallel.world_size", parallel.world_size(), 1, SpecLimits::kMaxWorldSize);
  if (parallel.device() != "cpu" && parallel.device() != "cuda") {
    errors.Fail("parallel.device", "must be cpu or cuda (got '" +
                                       parallel.device().substr(0, SpecLimits::kMaxKeywordLength) +
                                       "')");
  }
  if (parallel.param_dtype() != "bf16" && parallel.param_dtype() != "fp32") {
    errors.Fail("parallel.param_dtype",
                "must be bf16 or fp32 (got '" +
                    parallel.param_dtype().substr(0, SpecLimits::kMaxKeywordLength) + "')");
  }
  if (parallel.reduce_dtype() != "fp32") {
    errors.Fail("parallel.reduce_dtype",
                "must be fp32, the only reduction dtype supported (got '" +
                    parallel.reduce_dtype().substr(0, SpecLimits::kMaxKeywordLength) + "')");
  }
  const std::string& recompute = parallel.activation_recompute();
  if (!recompute.empty() && recompute != "none" && recompute != "ffn" && recompute != "block") {
    errors.Fail("parallel.activation_recompute",
                "must be none, ffn or block (got '" +
                    recompute.substr(0, SpecLimits::kMaxKeywordLength) + "')");
  }
  if (parallel.device() == "cuda") ValidateCudaLimits(spec, errors);
}

}  // namespace fsdpd
