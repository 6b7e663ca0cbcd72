#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "base/status_macros.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_tensor_core.cuh"
#include "kernels/cuda/device_common.cuh"

namespace fsdpd::cuda {
namespace {

// Rows a block owns (one per thread): query rows in forward and dQ, key rows in dK/dV.
constexpr int kRows = 64;
// Rows of the tile streamed through shared memory.
constexpr int kTile = 32;

struct Geometry {
  int64_t batch;
  int64_t seq;
  int64_t heads;     // query heads
  int64_t dim;       // heads·head_dim: q's width, and out's row
  int64_t kv_heads;  // key and value heads, dividing heads
  int64_t group;     // heads / kv_heads: the query heads sharing a kv head
  int64_t kv_dim;    // kv_heads·head_dim: k's and v's width
  int64_t stride;    // qkv's row: dim + 2·kv_dim
  int head_dim;
  float scale;
};

// Columns of a head's slice in a packed qkv row: q of query head h, k and v of kv head kv.
__device__ __forceinline__ int64_t QueryColumn(const Geometry& g, int64_t h) {
  return h * g.head_dim;
}
__device__ __forceinline__ int64_t KeyColumn(const Geometry& g, int64_t kv) {
  return g.dim + kv * g.head_dim;
}
__device__ __forceinline__ int64_t ValueColumn(const Geometry& g, int64_t kv) {
  return g.dim + g.kv_dim + kv * g.head_dim;
}

// Rows [first, first + rows) of one head's slice (starting at `column`) into shared memory as
// fp32 with row stride `stride`; columns past head_dim and rows past seq read as zero.
template <int HD>
__device__ void LoadTile(const __nv_bfloat16* base, int64_t row_stride, int64_t column,
                         int64_t first, int rows, const Geometry& g, float* tile, int stride) {
  for (int index = threadIdx.x; index < rows * HD; index += blockDim.x) {
    const int r = index / HD;
    const int d = index % HD;
    const int64_t s = first + r;
    float value = 0.0f;
    if (s < g.seq && d < g.head_dim) value = __bfloat162float(base[s * row_stride + column + d]);
    tile[r * stride + d] = value;
  }
}

template <int HD>
__global__ void __launch_bounds__(kRows)
    AttentionForwardKernel(const __nv_bfloat16* qkv, Geometry g, bool causal, __nv_bfloat16* out,
                           float* lse) {
  extern __shared__ float shared[];
  float* q_tile = shared;                     // kRows × (HD + 1): each thread's own row
  float* k_tile = q_tile + kRows * (HD + 1);  // kTile × HD, read by every thread
  float* v_tile = k_tile + kTile * HD;
  const int64_t b = blockIdx.y / g.heads;
  const int64_t h = blockIdx.y % g.heads;
  const int64_t kv = h / g.group;
  const int64_t q_first = int64_t{blockIdx.x} * kRows;
  const __nv_bfloat16* base = qkv + b * g.seq * g.stride;
  const int64_t stride = g.stride;
  LoadTile<HD>(base, stride, QueryColumn(g, h), q_first, kRows, g, q_tile, HD + 1);
  const int64_t i = q_first + threadIdx.x;
  const float* q = q_tile + threadIdx.x * (HD + 1);

  float acc[HD];
#pragma unroll
  for (int d = 0; d < HD; ++d) acc[d] = 0.0f;
  float row_max = -INFINITY;
  float row_sum = 0.0f;
  const int64_t key_end = causal ? min(g.seq, q_first + kRows) : g.seq;
  for (int64_t k_first = 0; k_first < key_end; k_first += kTile) {
    __syncthreads();
    LoadTile<HD>(base, stride, KeyColumn(g, kv), k_first, kTile, g, k_tile, HD);
    LoadTile<HD>(base, stride, ValueColumn(g, kv), k_first, kTile, g, v_tile, HD);
    __syncthreads();
    float s[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) s[j] = 0.0f;
    for (int d = 0; d < HD; ++d) {
      const float qd = q[d];
#pragma unroll
      for (int j = 0; j < kTile; ++j) s[j] = fmaf(qd, k_tile[j * HD + d], s[j]);
    }
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const int64_t key = k_first + j;
      const bool valid = key < g.seq && (!causal || key <= i);
      s[j] = valid ? s[j] * g.scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float new_max = fmaxf(row_max, tile_max);
    if (new_max == -INFINITY) continue;  // nothing visible yet (only rows past seq)
    const float correction = row_max == -INFINITY ? 0.0f : expf(row_max - new_max);
    row_sum *= correction;
#pragma unroll
    for (int d = 0; d < HD; ++d) acc[d] *= correction;
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      s[j] = expf(s[j] - new_max);
      row_sum += s[j];
    }
#pragma unroll
    for (int d = 0; d < HD; ++d) {
      float value = acc[d];
#pragma unroll
      for (int j = 0; j < kTile; ++j) value = fmaf(s[j], v_tile[j * HD + d], value);
      acc[d] = value;
    }
    row_max = new_max;
  }
  if (i >= g.seq) return;
  const float inverse_sum = 1.0f / row_sum;
  __nv_bfloat16* output = out + (b * g.seq + i) * g.dim + h * g.head_dim;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    if (d < g.head_dim) output[d] = __float2bfloat16_rn(acc[d] * inverse_sum);
  }
  lse[(b * g.heads + h) * g.seq + i] = row_max + logf(row_sum);
}

// delta[b, h, i] = Σ_d dout · out over the head's slice: the softmax backward's row term.
__global__ void AttentionDeltaKernel(const __nv_bfloat16* dout, const __nv_bfloat16* out,
                                     Geometry g, float* delta) {
  const int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t rows = g.batch * g.heads * g.seq;
  if (index >= rows) return;
  const int64_t i = index % g.seq;
  const int64_t h = (index / g.seq) % g.heads;
  const int64_t b = index / (g.seq * g.heads);
  const int64_t offset = (b * g.seq + i) * g.dim + h * g.head_dim;
  float sum = 0.0f;
  for (int d = 0; d < g.head_dim; ++d) {
    sum = fmaf(__bfloat162float(dout[offset + d]), __bfloat162float(out[offset + d]), sum);
  }
  delta[index] = sum;
}

// dq for kRows query rows: streams key/value tiles, recomputing the probabilities.
template <int HD>
__global__ void __launch_bounds__(kRows)
    AttentionQueryGradientKernel(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                 const float* lse, const float* delta, Geometry g, bool causal,
                                 __nv_bfloat16* dqkv) {
  extern __shared__ float shared[];
  float* q_tile = shared;                        // kRows × (HD + 1)
  float* dout_tile = q_tile + kRows * (HD + 1);  // kRows × (HD + 1)
  float* k_tile = dout_tile + kRows * (HD + 1);  // kTile × HD
  float* v_tile = k_tile + kTile * HD;           // kTile × HD
  const int64_t b = blockIdx.y / g.heads;
  const int64_t h = blockIdx.y % g.heads;
  const int64_t kv = h / g.group;
  const int64_t q_first = int64_t{blockIdx.x} * kRows;
  const __nv_bfloat16* base = qkv + b * g.seq * g.stride;
  const int64_t stride = g.stride;
  LoadTile<HD>(base, stride, QueryColumn(g, h), q_first, kRows, g, q_tile, HD + 1);
  LoadTile<HD>(dout + b * g.seq * g.dim, g.dim, QueryColumn(g, h), q_first, kRows, g, dout_tile,
               HD + 1);
  const int64_t i = q_first + threadIdx.x;
  const float* q = q_tile + threadIdx.x * (HD + 1);
  const float* gradient = dout_tile + threadIdx.x * (HD + 1);
  const int64_t row = (b * g.heads + h) * g.seq + i;
  const float row_lse = i < g.seq ? lse[row] : 0.0f;
  const float row_delta = i < g.seq ? delta[row] : 0.0f;

  float dq[HD];
#pragma unroll
  for (int d = 0; d < HD; ++d) dq[d] = 0.0f;
  const int64_t key_end = causal ? min(g.seq, q_first + kRows) : g.seq;
  for (int64_t k_first = 0; k_first < key_end; k_first += kTile) {
    __syncthreads();
    LoadTile<HD>(base, stride, KeyColumn(g, kv), k_first, kTile, g, k_tile, HD);
    LoadTile<HD>(base, stride, ValueColumn(g, kv), k_first, kTile, g, v_tile, HD);
    __syncthreads();
    float s[kTile];
    float dp[kTile];
#pragma unroll
    for (int j = 0; j < kTile; ++j) s[j] = dp[j] = 0.0f;
    for (int d = 0; d < HD; ++d) {
      const float qd = q[d];
      const float gd = gradient[d];
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        s[j] = fmaf(qd, k_tile[j * HD + d], s[j]);
        dp[j] = fmaf(gd, v_tile[j * HD + d], dp[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < kTile; ++j) {
      const int64_t key = k_first + j;
      const bool valid = i < g.seq && key < g.seq && (!causal || key <= i);
      const float p = valid ? expf(s[j] * g.scale - row_lse) : 0.0f;
      s[j] = p * (dp[j] - row_delta);
    }
#pragma unroll
    for (int d = 0; d < HD; ++d) {
      float value = dq[d];
#pragma unroll
      for (int j = 0; j < kTile; ++j) value = fmaf(s[j], k_tile[j * HD + d], value);
      dq[d] = value;
    }
  }
  if (i >= g.seq) return;
  __nv_bfloat16* output = dqkv + (b * g.seq + i) * g.stride + QueryColumn(g, h);
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    if (d < g.head_dim) output[d] = __float2bfloat16_rn(dq[d] * g.scale);
  }
}

// dk and dv for kRows key rows of one kv head: streams query tiles (q, dout, lse, delta) of each
// query head of its group in turn, so the group's sum is taken in registers in a fixed order.
template <int HD>
__global__ void __launch_bounds__(kRows)
    AttentionKeyValueGradientKernel(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                    const float* lse, const float* delta, Geometry g, bool causal,
                                    __nv_bfloat16* dqkv) {
  extern __shared__ float shared[];
  float* k_tile = shared;                      // kRows × (HD + 1)
  float* v_tile = k_tile + kRows * (HD + 1);   // kRows × (HD + 1)
  float* dv_tile = v_tile + kRows * (HD + 1);  // kRows × (HD + 1), accumulators
  float* q_tile = dv_tile + kRows * (HD + 1);  // kTile × HD
  float* dout_tile = q_tile + kTile * HD;      // kTile × HD
  float* lse_tile = dout_tile + kTile * HD;    // kTile
  float* delta_tile = lse_tile + kTile;        // kTile
  const int64_t b = blockIdx.y / g.kv_heads;
  const int64_t kv = blockIdx.y % g.kv_heads;
  const int64_t k_first = int64_t{blockIdx.x} * kRows;
  const __nv_bfloat16* base = qkv + b * g.seq * g.stride;
  const __nv_bfloat16* dout_base = dout + b * g.seq * g.dim;
  const int64_t stride = g.stride;
  LoadTile<HD>(base, stride, KeyColumn(g, kv), k_first, kRows, g, k_tile, HD + 1);
  LoadTile<HD>(base, stride, ValueColumn(g, kv), k_first, kRows, g, v_tile, HD + 1);
  const int64_t j = k_first + threadIdx.x;
  const float* k = k_tile + threadIdx.x * (HD + 1);
  const float* v = v_tile + threadIdx.x * (HD + 1);
  float* dv = dv_tile + threadIdx.x * (HD + 1);
#pragma unroll
  for (int d = 0; d < HD; ++d) dv[d] = 0.0f;
  float dk[HD];
#pragma unroll
  for (int d = 0; d < HD; ++d) dk[d] = 0.0f;
  // Under the causal mask no query before the block's first key sees it.
  const int64_t q_start = causal ? k_first : 0;
  for (int64_t h = kv * g.group; h < (kv + 1) * g.group; ++h) {
    const int64_t rows_base = (b * g.heads + h) * g.seq;
    for (int64_t q_first = q_start; q_first < g.seq; q_first += kTile) {
      __syncthreads();
      LoadTile<HD>(base, stride, QueryColumn(g, h), q_first, kTile, g, q_tile, HD);
      LoadTile<HD>(dout_base, g.dim, QueryColumn(g, h), q_first, kTile, g, dout_tile, HD);
      for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
        const int64_t i = q_first + r;
        lse_tile[r] = i < g.seq ? lse[rows_base + i] : 0.0f;
        delta_tile[r] = i < g.seq ? delta[rows_base + i] : 0.0f;
      }
      __syncthreads();
      for (int r = 0; r < kTile; ++r) {
        const int64_t i = q_first + r;
        const bool valid = i < g.seq && j < g.seq && (!causal || i >= j);
        if (!valid) continue;  // masked pairs contribute nothing
        const float* qr = q_tile + r * HD;
        const float* gr = dout_tile + r * HD;
        float s = 0.0f;
        float dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HD; ++d) {
          s = fmaf(qr[d], k[d], s);
          dp = fmaf(gr[d], v[d], dp);
        }
        const float p = expf(s * g.scale - lse_tile[r]);
        const float ds = p * (dp - delta_tile[r]);
#pragma unroll
        for (int d = 0; d < HD; ++d) {
          dv[d] = fmaf(p, gr[d], dv[d]);
          dk[d] = fmaf(ds, qr[d], dk[d]);
        }
      }
    }
  }
  if (j >= g.seq) return;
  __nv_bfloat16* output = dqkv + (b * g.seq + j) * g.stride;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    if (d < g.head_dim) {
      output[KeyColumn(g, kv) + d] = __float2bfloat16_rn(dk[d] * g.scale);
      output[ValueColumn(g, kv) + d] = __float2bfloat16_rn(dv[d]);
    }
  }
}

absl::StatusOr<Geometry> CheckDims(const char* op, const AttentionDims& dims) {
  if (dims.batch <= 0 || dims.seq <= 0 || dims.heads <= 0 || dims.dim <= 0 ||
      dims.dim % dims.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": batch, seq, heads and dim must be positive and heads must divide dim;",
        " got batch ", dims.batch, ", seq ", dims.seq, ", heads ", dims.heads, ", dim ", dims.dim));
  }
  const int64_t kv_heads = dims.KvHeads();
  if (kv_heads <= 0 || dims.heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kv_heads (", dims.kv_heads,
                                                   ") must be positive and divide heads (",
                                                   dims.heads, ")"));
  }
  const int64_t head_dim = dims.dim / dims.heads;
  if (head_dim > kMaxAttentionHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": head_dim ", head_dim, " exceeds the supported ", kMaxAttentionHeadDim));
  }
  if (dims.batch * dims.heads > kMaxCudaAttentionBatchHeads) {
    return absl::InvalidArgumentError(absl::StrCat(op,
                                                   ": batch · heads = ", dims.batch * dims.heads,
                                                   " exceeds ", kMaxCudaAttentionBatchHeads));
  }
  Geometry g{dims.batch,
             dims.seq,
             dims.heads,
             dims.dim,
             kv_heads,
             dims.heads / kv_heads,
             kv_heads * head_dim,
             dims.dim + 2 * kv_heads * head_dim,
             static_cast<int>(head_dim),
             static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)))};
  return g;
}

template <int HD>
absl::Status LaunchForward(const __nv_bfloat16* qkv, const Geometry& g, bool causal,
                           __nv_bfloat16* out, float* lse, cudaStream_t stream) {
  const size_t shared = sizeof(float) * (kRows * (HD + 1) + 2 * kTile * HD);
  CUDA_CHECK(cudaFuncSetAttribute(AttentionForwardKernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared)));
  const dim3 grid(static_cast<unsigned>((g.seq + kRows - 1) / kRows),
                  static_cast<unsigned>(g.batch * g.heads));
  AttentionForwardKernel<HD><<<grid, kRows, shared, stream>>>(qkv, g, causal, out, lse);
  CUDA_CHECK_LAUNCH("AttentionForwardKernel");
  return absl::OkStatus();
}

template <int HD>
absl::Status LaunchBackward(const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const float* lse,
                            const float* delta, const Geometry& g, bool causal, __nv_bfloat16* dqkv,
                            cudaStream_t stream) {
  // dq: a block row per (batch, query head); dk and dv: one per (batch, kv head).
  const dim3 grid(static_cast<unsigned>((g.seq + kRows - 1) / kRows),
                  static_cast<unsigned>(g.batch * g.heads));
  const dim3 kv_grid(grid.x, static_cast<unsigned>(g.batch * g.kv_heads));
  const size_t query_shared = sizeof(float) * (2 * kRows * (HD + 1) + 2 * kTile * HD);
  CUDA_CHECK(cudaFuncSetAttribute(AttentionQueryGradientKernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(query_shared)));
  AttentionQueryGradientKernel<HD>
      <<<grid, kRows, query_shared, stream>>>(dout, qkv, lse, delta, g, causal, dqkv);
  CUDA_CHECK_LAUNCH("AttentionQueryGradientKernel");
  const size_t key_shared = sizeof(float) * (3 * kRows * (HD + 1) + 2 * kTile * HD + 2 * kTile);
  CUDA_CHECK(cudaFuncSetAttribute(AttentionKeyValueGradientKernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(key_shared)));
  AttentionKeyValueGradientKernel<HD>
      <<<kv_grid, kRows, key_shared, stream>>>(dout, qkv, lse, delta, g, causal, dqkv);
  CUDA_CHECK_LAUNCH("AttentionKeyValueGradientKernel");
  return absl::OkStatus();
}

bool Aligned(std::initializer_list<const void*> pointers) {
  for (const void* pointer : pointers) {
    if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0) return false;
  }
  return true;
}

tensor_core::FlashGeometry FlashGeometryOf(const Geometry& g) {
  return tensor_core::FlashGeometry{g.batch,    g.seq,   g.heads,  g.dim,   g.scale,
                                    g.kv_heads, g.group, g.kv_dim, g.stride};
}

absl::Status CheckWorkspace(const char* op, const void* workspace, int64_t bytes, int64_t needed) {
  if (needed > 0 && (workspace == nullptr || bytes < needed)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": workspace of ", bytes, " bytes, need ", needed));
  }
  return absl::OkStatus();
}

// FSDPD_ATTENTION_KERNEL, read once: kAuto when unset or "auto".
absl::StatusOr<AttentionKernel> KernelFromEnvironment() {
  static const absl::StatusOr<AttentionKernel> kernel = []() -> absl::StatusOr<AttentionKernel> {
    const char* value = std::getenv("FSDPD_ATTENTION_KERNEL");
    const std::string name = value == nullptr ? "auto" : value;
    if (name == "auto" || name.empty()) return AttentionKernel::kAuto;
    if (name == "cudnn") return AttentionKernel::kCudnn;
    if (name == "tensor-core") return AttentionKernel::kTensorCore;
    if (name == "cuda-core") return AttentionKernel::kCudaCore;
    return absl::InvalidArgumentError(absl::StrCat(
        "FSDPD_ATTENTION_KERNEL=", name, ": expected auto, cudnn, tensor-core or cuda-core"));
  }();
  return kernel;
}

struct AttentionPlan {
  AttentionKernel kernel;  // never kAuto
  AttentionWorkspace workspace;
};

// The implementation that runs these (checked) dims and its scratch, decided in one place; a
// cuDNN shape is prepared once and cached by attention_cudnn.cc.
absl::StatusOr<AttentionPlan> PlanAttention(const AttentionDims& dims, const Geometry& g,
                                            bool causal) {
  AttentionKernel kernel = dims.kernel;
  if (kernel == AttentionKernel::kAuto) {
    absl::StatusOr<AttentionKernel> chosen = KernelFromEnvironment();
    if (!chosen.ok()) return chosen.status();
    kernel = *chosen;
  }
  if (kernel == AttentionKernel::kCudnn ||
      (kernel == AttentionKernel::kAuto && cudnn_attention::Compiled())) {
    absl::StatusOr<cudnn_attention::Workspace> cudnn = cudnn_attention::Prepare(dims, causal);
    if (cudnn.ok()) {
      return AttentionPlan{AttentionKernel::kCudnn,
                           AttentionWorkspace{cudnn->forward_bytes, cudnn->backward_bytes}};
    }
    if (kernel == AttentionKernel::kCudnn) return cudnn.status();
  }
  if (g.head_dim > kMaxOwnCudaAttentionHeadDim) {
    // Only cuDNN runs this head_dim: say why it did not (own kernels asked for, no cuDNN in the
    // build or on the library path, or the shape refused) and what the own kernels support.
    const std::string reason =
        kernel != AttentionKernel::kAuto
            ? "FSDPD_ATTENTION_KERNEL selects the own kernels"
            : std::string(cudnn_attention::Prepare(dims, causal).status().message());
    return absl::FailedPreconditionError(
        absl::StrCat("attention with head_dim ", g.head_dim,
                     " needs cuDNN's fused attention (the own kernels support head_dim up to ",
                     kMaxOwnCudaAttentionHeadDim, "): ", reason));
  }
  if (kernel == AttentionKernel::kAuto) kernel = AttentionKernel::kTensorCore;
  if (kernel == AttentionKernel::kTensorCore && !tensor_core::Supports(g.head_dim)) {
    kernel = AttentionKernel::kCudaCore;
  }
  // The own backward keeps one fp32 delta per (batch, head, row).
  return AttentionPlan{kernel,
                       AttentionWorkspace{0, std::max<int64_t>(1, g.batch * g.heads * g.seq) * 4}};
}

absl::StatusOr<AttentionPlan> PlanAttention(const char* op, const AttentionDims& dims,
                                            bool causal) {
  absl::StatusOr<Geometry> g = CheckDims(op, dims);
  if (!g.ok()) return g.status();
  return PlanAttention(dims, *g, causal);
}

}  // namespace

absl::StatusOr<AttentionKernel> ResolveAttentionKernel(const AttentionDims& dims, bool causal) {
  absl::StatusOr<AttentionPlan> plan = PlanAttention("Attention", dims, causal);
  if (!plan.ok()) return plan.status();
  return plan->kernel;
}

absl::StatusOr<AttentionWorkspace> AttentionWorkspaceBytes(const AttentionDims& dims, bool causal) {
  absl::StatusOr<AttentionPlan> plan = PlanAttention("Attention", dims, causal);
  if (!plan.ok()) return plan.status();
  return plan->workspace;
}

absl::Status AttentionForward(const __nv_bfloat16* qkv, const AttentionDims& dims, bool causal,
                              __nv_bfloat16* out, float* lse, void* workspace,
                              int64_t workspace_bytes, cudaStream_t stream) {
  absl::StatusOr<Geometry> g = CheckDims("AttentionForward", dims);
  if (!g.ok()) return g.status();
  absl::StatusOr<AttentionPlan> plan = PlanAttention(dims, *g, causal);
  if (!plan.ok()) return plan.status();
  FSDPD_RETURN_IF_ERROR(CheckWorkspace("AttentionForward", workspace, workspace_bytes,
                                       plan->workspace.forward_bytes));
  const AttentionKernel kernel = plan->kernel;
  if (kernel == AttentionKernel::kCudnn) {
    return cudnn_attention::Forward(qkv, dims, causal, out, lse, workspace, stream);
  }
  if (kernel == AttentionKernel::kTensorCore && Aligned({qkv, out})) {
    return tensor_core::Forward(qkv, FlashGeometryOf(*g), g->head_dim, causal, out, lse, stream);
  }
  if (g->head_dim <= 32) return LaunchForward<32>(qkv, *g, causal, out, lse, stream);
  if (g->head_dim <= 64) return LaunchForward<64>(qkv, *g, causal, out, lse, stream);
  return LaunchForward<128>(qkv, *g, causal, out, lse, stream);
}

absl::Status AttentionBackward(const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                               const __nv_bfloat16* out, const float* lse,
                               const AttentionDims& dims, bool causal, __nv_bfloat16* dqkv,
                               void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  absl::StatusOr<Geometry> g = CheckDims("AttentionBackward", dims);
  if (!g.ok()) return g.status();
  absl::StatusOr<AttentionPlan> plan = PlanAttention(dims, *g, causal);
  if (!plan.ok()) return plan.status();
  FSDPD_RETURN_IF_ERROR(CheckWorkspace("AttentionBackward", workspace, workspace_bytes,
                                       plan->workspace.backward_bytes));
  const AttentionKernel kernel = plan->kernel;
  if (kernel == AttentionKernel::kCudnn) {
    return cudnn_attention::Backward(dout, qkv, out, lse, dims, causal, dqkv, workspace, stream);
  }
  auto* delta = static_cast<float*>(workspace);
  const int64_t rows = g->batch * g->heads * g->seq;
  AttentionDeltaKernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, stream>>>(dout, out, *g,
                                                                                      delta);
  CUDA_CHECK_LAUNCH("AttentionDeltaKernel");
  if (kernel == AttentionKernel::kTensorCore && Aligned({dout, qkv, dqkv})) {
    return tensor_core::Backward(dout, qkv, lse, delta, FlashGeometryOf(*g), g->head_dim, causal,
                                 dqkv, stream);
  }
  if (g->head_dim <= 32) {
    return LaunchBackward<32>(dout, qkv, lse, delta, *g, causal, dqkv, stream);
  }
  if (g->head_dim <= 64) {
    return LaunchBackward<64>(dout, qkv, lse, delta, *g, causal, dqkv, stream);
  }
  return LaunchBackward<128>(dout, qkv, lse, delta, *g, causal, dqkv, stream);
}

}  // namespace fsdpd::cuda
