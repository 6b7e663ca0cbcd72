// The job spec: YAML parsing, defaults, validation and size estimates.
// One implementation shared by fsdpctl (parse), fsdpd (validate, admit) and the worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdpd/v1/spec.pb.h"

namespace fsdpd {

struct FieldError {
  std::string field;  // dotted path, e.g. "model.dim"
  std::string message;
};

// The defaults of the job spec (README.md "The job spec") (the seed's workload), with an empty
// name.
v1::JobSpec DefaultJobSpec();

// Sets every field of spec that is unset (no presence) to its DefaultJobSpec() value; fields
// set, zeros and empty strings included, stay. The coordinator applies it to every submitted
// spec, so the stored spec is what the job runs with.
void ApplyJobSpecDefaults(v1::JobSpec* spec);

// Whether parsing fills the fields the YAML leaves out with their defaults (the worker, tests)
// or leaves them unset (fsdpctl, which sends only what the YAML says: the coordinator applies
// the defaults).
enum class SpecDefaults { kApply, kLeaveUnset };

// Parses a YAML job spec. Unknown keys and wrongly typed values are errors that name the field.
// The result is not yet validated. The YAML keys are the proto's field names; `train.betas:
// [b1, b2]` is still read as train.beta1 and train.beta2.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(const std::string& yaml_text,
                                             SpecDefaults defaults = SpecDefaults::kApply);
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path,
                                            SpecDefaults defaults = SpecDefaults::kApply);

// Renders a spec back to YAML (what `fsdpctl status --spec` and logs show).
std::string JobSpecToYaml(const v1::JobSpec& spec);

// Checks every field's type-independent bounds. Empty means valid.
std::vector<FieldError> ValidateJobSpec(const v1::JobSpec& spec);

// "model.dim: must be divisible by model.heads (got 100 and 3); ..." on one line.
std::string FormatFieldErrors(const std::vector<FieldError>& errors);

// Parameter count of the model (MiniLLM or llama) for this config (the seed's 735,199,232 for
// the defaults).
int64_t ParameterCount(const v1::ModelSpec& model);

// llama's kv_heads and SwiGLU width in effect: kv_heads 0 is heads, ffn_dim 0 is ffn_mult · dim.
int64_t LlamaKvHeads(const v1::ModelSpec& model);
int64_t LlamaFfnDim(const v1::ModelSpec& model);

// The most bytes an exported model of this config can take: every parameter in fp32, plus a
// safetensors header of at most 64 KiB and 256 bytes per tensor (names, shapes, offsets and the
// model's config). The coordinator refuses a larger upload from rank 0.
int64_t ExportedModelBytesLimit(const v1::ModelSpec& model);

// Training FLOPs per token, for MFU: 6·N + 12·layers·seq·dim, N the weights of matrix products
// (PaLM's convention: the embedding lookup and the norms are not counted; the PyTorch anchor's
// tflops_per_gpu counts every parameter, about 9% more for the seed).
double FlopsPerToken(const v1::JobSpec& spec);

// A conservative estimate of the bytes one rank needs on its device: the fp32 master shard,
// gradient shard (only the units in flight without clipping: the optimizer runs in backward)
// and AdamW state, two unsharded units (current and prefetched), and the activations kept under
// parallel.activation_recompute.
double EstimateRankDeviceBytes(const v1::JobSpec& spec);

// The first GPUs with FP8 tensor cores, as major · 10 + minor: sm_89 (Ada), then Hopper and newer.
// The one threshold for the scheduler, the CUDA backend's FP8 GEMM and the roofline's FP8 peak.
inline constexpr int kFp8MinComputeCapability = 89;

// The oldest GPU a rank of the spec runs on, as major · 10 + minor: kFp8MinComputeCapability for
// parallel.matmul_dtype fp8 on cuda, whose products need FP8 tensor cores; 0 (any) otherwise.
// The scheduler keeps the job off older workers (server/scheduler.h).
int MinComputeCapability(const v1::JobSpec& spec);

}  // namespace fsdpd
