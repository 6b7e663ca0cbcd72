// The parallel section and the rules that depend on the device: what the CUDA engine cannot
// run is rejected here, at submission, instead of on a worker after scheduling.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "proto/spec/job_spec.h"
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

// fp8 casts write each operand and its transpose with 16-byte stores, and cuBLASLt's FP8 products
// want every reduction dimension a multiple of 16 (kernels/cuda/fp8_gemm.h): each dimension of a
// block's linear layers, tokens included, must be one. The CPU backend emulates the same
// products (kernels/cpu/fp8.h) and takes the same rule, so a spec means the same on both.
void ValidateMatmulDtype(const v1::JobSpec& spec, FieldErrors& errors) {
  const std::string& dtype = spec.parallel().matmul_dtype();
  if (!dtype.empty() && dtype != "bf16" && dtype != "fp8") {
    errors.Fail("parallel.matmul_dtype", "must be bf16 or fp8 (got '" +
                                             dtype.substr(0, SpecLimits::kMaxKeywordLength) + "')");
    return;
  }
  if (dtype != "fp8") return;
  const v1::ModelSpec& model = spec.model();
  if (model.heads() <= 0 || model.dim() % model.heads() != 0) return;  // reported elsewhere
  const int64_t head_dim = model.dim() / model.heads();
  // The widths the model builds (worker/model/model_config.h): MiniLLM's attention has as many
  // kv heads as heads and its FFN ffn_mult · dim; llama's read kv_heads and ffn_dim.
  const bool llama = model.arch() == "llama";
  const int64_t kv_heads = llama ? LlamaKvHeads(model) : model.heads();
  const int64_t ffn = llama ? LlamaFfnDim(model) : model.ffn_mult() * model.dim();
  const struct {
    const char* what;
    int64_t value;
  } dimensions[] = {
      {"model.dim", model.dim()},
      {"the qkv width (heads + 2·kv_heads)·head_dim", (model.heads() + 2 * kv_heads) * head_dim},
      {"the FFN width", ffn},
      {"train.batch_size · data.seq_len", spec.train().batch_size() * spec.data().seq_len()},
  };
  for (const auto& dimension : dimensions) {
    if (dimension.value % 16 != 0) {
      errors.Fail("parallel.matmul_dtype",
                  absl::StrCat("fp8 needs every dimension of the linear layers a multiple of 16: ",
                               dimension.what, " is ", dimension.value));
    }
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
  ValidateMatmulDtype(spec, errors);
  if (parallel.device() == "cuda") ValidateCudaLimits(spec, errors);
}

}  // namespace fsdpd
