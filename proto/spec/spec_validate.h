// One validator per section of the job spec. Each spec is validated once, where it enters: the
// coordinator runs them all (ValidateJobSpec) at submission, before it stores a job, and
// fsdpd-train after it reads its spec file. A worker trusts the stored spec its assignment carries
// and checks only what it alone can know: its device, its files and its allowed roots
// (worker/trainer.cc). A rule that a worker would otherwise find late (CUDA needs bf16
// parameters, the CUDA attention's head_dim limit) lives here, so such a job is rejected at
// submission.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/attention_limits.h"
#include "fsdpd/v1/spec.pb.h"
#include "proto/spec/field_errors.h"

namespace fsdpd {

// Bounds that keep a spec within what one coordinator and its workers can hold. A spec beyond
// them is a typo or an attack, not a job. README.md "The job spec" documents them.
struct SpecLimits {
  static constexpr int64_t kMaxVocab = 1 << 24;
  static constexpr int64_t kMaxDim = 1 << 16;
  static constexpr int64_t kMaxLayers = 1024;
  // head_dim and, on CUDA, batch · heads are bounded by what attention runs:
  // base/attention_limits.h, which the CUDA kernels include too.
  static constexpr int64_t kMaxSeqLen = 1 << 20;
  static constexpr int64_t kMaxBatch = 1 << 16;
  static constexpr int64_t kMaxGradAccumSteps = 1 << 12;
  static constexpr int64_t kMaxEvalBatches = 100000;
  static constexpr int64_t kMaxSteps = 1'000'000'000;
  static constexpr int64_t kMaxWorldSize = 65536;
  static constexpr size_t kMaxNameLength = 128;
  static constexpr size_t kMaxPathLength = 4096;
  // Every other string field (device, dtypes, schedule names) is a short keyword.
  static constexpr size_t kMaxKeywordLength = 64;
};

// Every string field against its limit (name, paths, keywords), before any other rule reads
// them. ValidateJobSpec runs it first, and fsdpctl runs it before sending, so an oversized field
// is named instead of failing as an oversized gRPC message.
void ValidateStringLengths(const v1::JobSpec& spec, FieldErrors& errors);

void ValidateName(const v1::JobSpec& spec, FieldErrors& errors);
void ValidateModel(const v1::ModelSpec& model, FieldErrors& errors);
void ValidateData(const v1::JobSpec& spec, FieldErrors& errors);
// data.eval_every (0: off) and data.eval_batches in range, data.eval_path given when validation
// runs and read like data.path (validate_eval.cc).
void ValidateEval(const v1::JobSpec& spec, FieldErrors& errors);
void ValidateTrain(const v1::TrainSpec& train, FieldErrors& errors);
// train.grad_accum_steps: 1 to kMaxGradAccumSteps micro-batches per step
// (validate_accumulation.cc).
void ValidateGradAccumulation(const v1::TrainSpec& train, FieldErrors& errors);
void ValidateParallel(const v1::JobSpec& spec, FieldErrors& errors);
void ValidateCheckpoint(const v1::JobSpec& spec, FieldErrors& errors);
void ValidateProfileAndPolicy(const v1::JobSpec& spec, FieldErrors& errors);

// Syntax of every path field that is set (SpecPathFields, proto/spec/spec_path_fields.h), the
// same on every host: absolute, no control characters, no empty, "." or ".." components, and not
// inside /etc, /proc, /sys or /dev. Whether the file exists and lies under the worker's allowed
// roots is the worker's check.
void ValidatePaths(const v1::JobSpec& spec, FieldErrors& errors);

}  // namespace fsdpd
