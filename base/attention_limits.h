// The shapes attention can run, in one place: the job spec's validator (proto/spec) refuses at
// submission a job that no worker could run, and the CUDA kernels (kernels/cuda/attention.h)
// refuse a call outside them. Both include this header, so the two cannot disagree.
#pragma once

#include <cstdint>

namespace fsdpd {

// The largest head_dim (dim / heads) any implementation runs: the CPU kernels and, on CUDA,
// cuDNN's fused attention (Hopper's supports 256).
inline constexpr int64_t kMaxAttentionHeadDim = 256;

// The largest head_dim CUDA's own kernels run (tensor-core or CUDA-core). Above it only cuDNN
// does; the submission cannot know whether a worker has cuDNN, so such a cuda job is accepted and
// a worker without cuDNN fails it permanently, with an error that names both limits.
inline constexpr int64_t kMaxOwnCudaAttentionHeadDim = 128;

// CUDA's own attention kernels launch one block row per (batch, head) in a grid dimension that
// is capped at 65535.
inline constexpr int64_t kMaxCudaAttentionBatchHeads = 65535;

}  // namespace fsdpd
