#include "worker/backend/cuda_ops.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "base/status_macros.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rotary.h"
#include "kernels/cuda/silu.h"
#include "kernels/cuda/swiglu.h"
#include "worker/backend/op_arguments.h"

namespace fsdpd {
namespace {

using bf16 = __nv_bfloat16;

#define FSDPD_CUDA_OPS_STREAM(name, stream) \
  FSDPD_ASSIGN_OR_RETURN(cudaStream_t name, CudaStreamOf(stream))

// Shapes, counts and aliasing are checked once for every backend by CheckedOps, which the
// backend puts in front of these ops; here only what is CUDA's: the dtype of each tensor and
// the kernels' own limits.
struct Expected {
  const Tensor* tensor;
  const char* name;
  DType dtype;
};

// Each present tensor (optional ones may have no data) has its expected dtype.
absl::Status Dtypes(const OpArguments& check, std::initializer_list<Expected> tensors) {
  for (const Expected& expected : tensors) {
    if (expected.tensor->data == nullptr) continue;
    FSDPD_RETURN_IF_ERROR(check.Typed(*expected.tensor, expected.name, expected.dtype));
  }
  return absl::OkStatus();
}

constexpr DType kBf = DType::kBF16;
constexpr const char* kNoFp8 =
    "this device has no FP8 tensor cores (sm_89 or newer): parallel.matmul_dtype fp8 cannot run "
    "here";
constexpr DType kF = DType::kF32;

// The linear ops' dtypes, bf16 and FP8 alike: bf16 in and out, fp32 parameter gradients.
absl::Status LinearForwardDtypes(const OpArguments& check, const Tensor& x, const Tensor& weight,
                                 const Tensor& bias, const Tensor& out) {
  return Dtypes(
      check, {{&weight, "weight", kBf}, {&x, "x", kBf}, {&bias, "bias", kBf}, {&out, "out", kBf}});
}

absl::Status LinearBackwardDtypes(const OpArguments& check, const Tensor& dout, const Tensor& x,
                                  const Tensor& weight, const Tensor& dx, const Tensor& dweight,
                                  const Tensor& dbias) {
  return Dtypes(check, {{&weight, "weight", kBf},
                        {&x, "x", kBf},
                        {&dout, "dout", kBf},
                        {&dx, "dx", kBf},
                        {&dweight, "dweight", kF},
                        {&dbias, "dbias", kF}});
}

const bf16* Bf16(const Tensor& t) { return static_cast<const bf16*>(t.data); }
bf16* MutableBf16(const Tensor& t) { return static_cast<bf16*>(t.data); }
// An Fp8OperandAmax's device float, or nullptr where the tensor is absent.
float* AmaxOrNull(const Tensor& t) { return t.data != nullptr ? t.as<float>() : nullptr; }

}  // namespace

CudaOps::CudaOps(CudaAllocator* allocator, cuda::Gemm* gemm, int64_t optimizer_grid_limit,
                 cuda::Fp8Gemm* fp8_gemm)
    : allocator_(allocator),
      gemm_(gemm),
      fp8_gemm_(fp8_gemm),
      optimizer_grid_limit_(optimizer_grid_limit) {}

cuda::AdamWStepParams CudaOps::StepParams(const AdamWParams& params) const {
  cuda::AdamWStepParams step{params.lr,  params.beta1,        params.beta2,
                             params.eps, params.weight_decay, params.step};
  step.grid_limit = optimizer_grid_limit_;
  return step;
}

CudaOps::~CudaOps() {
  for (auto& [stream, scratch] : scratch_) {
    cudaStreamSynchronize(stream);
    allocator_->Free(scratch.data);
  }
}

absl::StatusOr<void*> CudaOps::ScratchFor(cudaStream_t stream, int64_t bytes) {
  Scratch& scratch = scratch_[stream];
  if (scratch.bytes >= bytes && scratch.data != nullptr) return scratch.data;
  if (scratch.data != nullptr) {
    // Work already queued may still read the old buffer.
    CUDA_CHECK(cudaStreamSynchronize(stream));
    allocator_->Free(scratch.data);
    scratch = Scratch{};
  }
  absl::StatusOr<void*> data = allocator_->Allocate(std::max<int64_t>(bytes, 1));
  if (!data.ok()) {  // kept by hand: the error gains what the memory was for
    return absl::Status(data.status().code(), absl::StrCat("CUDA ops scratch of ", bytes,
                                                           " bytes: ", data.status().message()));
  }
  scratch.data = *data;
  scratch.bytes = std::max<int64_t>(bytes, 1);
  return scratch.data;
}

absl::Status CudaOps::EmbeddingForward(const Tensor& weight, const Tensor& tokens,
                                       const Tensor& out, Stream& stream) {
  OpArguments check("EmbeddingForward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&weight, "weight", kBf}, {&out, "out", kBf}}));
  return cuda::EmbeddingForward(Bf16(weight), tokens.as<int32_t>(), tokens.numel(), weight.shape[1],
                                MutableBf16(out), cuda_stream);
}

absl::Status CudaOps::EmbeddingBackward(const Tensor& dout, const Tensor& tokens,
                                        const Tensor& dweight, Stream& stream) {
  OpArguments check("EmbeddingBackward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&dweight, "dweight", kF}, {&dout, "dout", kBf}}));
  const int64_t bytes = cuda::EmbeddingBackwardScratchBytes(tokens.numel());
  FSDPD_ASSIGN_OR_RETURN(void* scratch, ScratchFor(cuda_stream, bytes));
  return cuda::EmbeddingBackward(Bf16(dout), tokens.as<int32_t>(), tokens.numel(), dweight.shape[1],
                                 dweight.shape[0], dweight.as<float>(), scratch, bytes,
                                 cuda_stream);
}

absl::Status CudaOps::RmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                                     const Tensor& out, const Tensor& rstd, const Tensor& out_amax,
                                     Stream& stream) {
  OpArguments check("RmsNormForward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(
      Dtypes(check, {{&x, "x", kBf}, {&weight, "weight", kBf}, {&out, "out", kBf}}));
  if (x.shape.back() <= 0) {
    return check.Error(absl::StrCat("x must have a positive last dimension, got ", x.Describe()));
  }
  return cuda::RmsNormForward(Bf16(x), Bf16(weight), RowsOf(x), x.shape.back(),
                              static_cast<float>(eps), MutableBf16(out), rstd.as<float>(),
                              AmaxOrNull(out_amax), cuda_stream);
}

absl::Status CudaOps::RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                      const Tensor& rstd, const Tensor& dx, Write dx_write,
                                      const Tensor& dweight, Write dweight_write,
                                      const Tensor& dx_amax, Stream& stream) {
  OpArguments check("RmsNormBackward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&x, "x", kBf},
                                       {&dout, "dout", kBf},
                                       {&weight, "weight", kBf},
                                       {&dx, "dx", kBf},
                                       {&dweight, "dweight", kF}}));
  const int64_t rows = RowsOf(x);
  const int64_t dim = x.shape.back();
  if (dim <= 0) {
    return check.Error(absl::StrCat("x must have a positive last dimension, got ", x.Describe()));
  }
  const int64_t bytes = cuda::RmsNormBackwardScratchFloats(rows, dim) * 4;
  FSDPD_ASSIGN_OR_RETURN(void* scratch, ScratchFor(cuda_stream, bytes));
  return cuda::RmsNormBackward(Bf16(dout), Bf16(x), Bf16(weight), rstd.as<float>(), rows, dim,
                               dx_write == Write::kAccumulate, MutableBf16(dx), dweight.as<float>(),
                               dweight_write == Write::kAccumulate, static_cast<float*>(scratch),
                               AmaxOrNull(dx_amax), cuda_stream);
}

absl::Status CudaOps::LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& out, Stream& stream) {
  OpArguments check("LinearForward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(LinearForwardDtypes(check, x, weight, bias, out));
  const int64_t rows = RowsOf(x);
  if (rows == 0) return absl::OkStatus();
  return gemm_->LinearForward(Bf16(x), Bf16(weight), bias.data != nullptr ? Bf16(bias) : nullptr,
                              rows, weight.shape[0], weight.shape[1], MutableBf16(out),
                              cuda_stream);
}

absl::Status CudaOps::LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     Write grad_write, Stream& stream) {
  OpArguments check("LinearBackward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(LinearBackwardDtypes(check, dout, x, weight, dx, dweight, dbias));
  if (dbias.data != nullptr && dweight.data == nullptr) {
    return check.Error(
        "dbias without dweight is not supported: the bias gradient is fused "
        "into the weight-gradient product");
  }
  const int64_t rows = RowsOf(x);
  const int64_t out_features = weight.shape[0];
  const int64_t in_features = weight.shape[1];
  if (rows == 0) return absl::OkStatus();
  if (dx.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(gemm_->LinearInputGradient(Bf16(dout), Bf16(weight), rows, out_features,
                                                     in_features, MutableBf16(dx), cuda_stream));
  }
  if (dweight.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(gemm_->LinearWeightGradient(
        Bf16(dout), Bf16(x), rows, out_features, in_features, dweight.as<float>(),
        dbias.data != nullptr ? dbias.as<float>() : nullptr, cuda_stream,
        grad_write == Write::kAccumulate));
  }
  return absl::OkStatus();
}

absl::Status CudaOps::Fp8LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                       const Tensor& out, const Fp8OperandAmax& amax,
                                       Stream& stream) {
  OpArguments check("Fp8LinearForward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(LinearForwardDtypes(check, x, weight, bias, out));
  if (fp8_gemm_ == nullptr) return check.Error(kNoFp8);
  const int64_t rows = RowsOf(x);
  if (rows == 0) return absl::OkStatus();
  const int64_t n = weight.shape[0], k = weight.shape[1];
  FSDPD_ASSIGN_OR_RETURN(void* scratch,
                         ScratchFor(cuda_stream, cuda::Fp8LinearForwardScratchBytes(rows, n, k)));
  return cuda::Fp8LinearForward(*fp8_gemm_, Bf16(x), Bf16(weight),
                                bias.data != nullptr ? Bf16(bias) : nullptr, rows, n, k,
                                MutableBf16(out), AmaxOrNull(amax.x), scratch, cuda_stream);
}

absl::Status CudaOps::Fp8LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                        const Tensor& dx, const Tensor& dweight,
                                        const Tensor& dbias, Write grad_write,
                                        const Fp8OperandAmax& amax, Stream& stream) {
  OpArguments check("Fp8LinearBackward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(LinearBackwardDtypes(check, dout, x, weight, dx, dweight, dbias));
  if (fp8_gemm_ == nullptr) return check.Error(kNoFp8);
  const int64_t rows = RowsOf(x);
  if (rows == 0) return absl::OkStatus();
  const int64_t n = weight.shape[0], k = weight.shape[1];
  FSDPD_ASSIGN_OR_RETURN(void* scratch,
                         ScratchFor(cuda_stream, cuda::Fp8LinearBackwardScratchBytes(rows, n, k)));
  return cuda::Fp8LinearBackward(*fp8_gemm_, Bf16(dout), Bf16(x), Bf16(weight), rows, n, k,
                                 dx.data != nullptr ? MutableBf16(dx) : nullptr,
                                 dweight.data != nullptr ? dweight.as<float>() : nullptr,
                                 dbias.data != nullptr ? dbias.as<float>() : nullptr,
                                 grad_write == Write::kAccumulate, AmaxOrNull(amax.dout),
                                 AmaxOrNull(amax.x), scratch, cuda_stream);
}

namespace {

// The head_dim of a packed qkv[B, S, (heads + 2·kv_heads)·hd] CheckedOps accepted.
int64_t HeadDimOf(const Tensor& qkv, int64_t heads, int64_t kv_heads) {
  return qkv.shape[2] / (heads + 2 * kv_heads);
}

// The dims of a qkv CheckedOps accepted, within the kernels' head_dim limit.
absl::StatusOr<cuda::AttentionDims> AttentionDimsOf(const OpArguments& check, const Tensor& qkv,
                                                    int64_t heads, int64_t kv_heads) {
  const int64_t head_dim = HeadDimOf(qkv, heads, kv_heads);
  cuda::AttentionDims dims{qkv.shape[0], qkv.shape[1], heads, heads * head_dim};
  dims.kv_heads = kv_heads;
  if (head_dim > kMaxAttentionHeadDim) {
    return check.Error(absl::StrCat("head_dim ", head_dim, " exceeds ", kMaxAttentionHeadDim));
  }
  return dims;
}

}  // namespace

absl::Status CudaOps::AttentionForward(const Tensor& qkv, int64_t heads, int64_t kv_heads,
                                       bool causal, const Tensor& out, const Tensor& lse,
                                       Stream& stream) {
  OpArguments check("AttentionForward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&qkv, "qkv", kBf}, {&out, "out", kBf}}));
  FSDPD_ASSIGN_OR_RETURN(const cuda::AttentionDims dims,
                         AttentionDimsOf(check, qkv, heads, kv_heads));
  if (dims.batch == 0 || dims.seq == 0) return absl::OkStatus();
  FSDPD_ASSIGN_OR_RETURN(const cuda::AttentionWorkspace workspace,
                         cuda::AttentionWorkspaceBytes(dims, causal));
  void* scratch = nullptr;
  if (workspace.forward_bytes > 0) {
    FSDPD_ASSIGN_OR_RETURN(scratch, ScratchFor(cuda_stream, workspace.forward_bytes));
  }
  return cuda::AttentionForward(Bf16(qkv), dims, causal, MutableBf16(out), lse.as<float>(), scratch,
                                workspace.forward_bytes, cuda_stream);
}

absl::Status CudaOps::AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                        const Tensor& lse, int64_t heads, int64_t kv_heads,
                                        bool causal, const Tensor& dqkv, Stream& stream) {
  OpArguments check("AttentionBackward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(
      check, {{&qkv, "qkv", kBf}, {&out, "out", kBf}, {&dout, "dout", kBf}, {&dqkv, "dqkv", kBf}}));
  FSDPD_ASSIGN_OR_RETURN(const cuda::AttentionDims dims,
                         AttentionDimsOf(check, qkv, heads, kv_heads));
  if (dims.batch == 0 || dims.seq == 0) return absl::OkStatus();
  FSDPD_ASSIGN_OR_RETURN(const cuda::AttentionWorkspace workspace,
                         cuda::AttentionWorkspaceBytes(dims, causal));
  const int64_t bytes = std::max<int64_t>(workspace.backward_bytes, 1);
  FSDPD_ASSIGN_OR_RETURN(void* scratch, ScratchFor(cuda_stream, bytes));
  return cuda::AttentionBackward(Bf16(dout), Bf16(qkv), Bf16(out), lse.as<float>(), dims, causal,
                                 MutableBf16(dqkv), scratch, bytes, cuda_stream);
}

// CheckedOps checked the packed shape (kv_heads dividing heads), an even head_dim and theta.
absl::Status CudaOps::Rotary(const Tensor& qkv, int64_t heads, int64_t kv_heads, double theta,
                             bool inverse, Stream& stream) {
  OpArguments check("Rotary (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&qkv, "qkv", kBf}}));
  const int64_t head_dim = HeadDimOf(qkv, heads, kv_heads);
  if (head_dim > cuda::kMaxRotaryHeadDim) {
    return check.Error(absl::StrCat("head_dim ", head_dim, " exceeds ", cuda::kMaxRotaryHeadDim,
                                    " (attention's limit) in qkv ", qkv.Describe()));
  }
  return cuda::Rotary(MutableBf16(qkv), {qkv.shape[0], qkv.shape[1], heads, kv_heads, head_dim},
                      theta, inverse, cuda_stream);
}

// CheckedOps checked gate_up[T, 2F], out[T, F] and that they do not overlap.
absl::Status CudaOps::SwigluForward(const Tensor& gate_up, const Tensor& out, Stream& stream) {
  OpArguments check("SwigluForward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&gate_up, "gate_up", kBf}, {&out, "out", kBf}}));
  return cuda::SwigluForward(Bf16(gate_up), RowsOf(gate_up), gate_up.shape.back() / 2,
                             MutableBf16(out), cuda_stream);
}

// CheckedOps checked the shapes and the aliasing (dgate_up exactly gate_up or disjoint from it).
absl::Status CudaOps::SwigluBackward(const Tensor& dout, const Tensor& gate_up,
                                     const Tensor& dgate_up, const Tensor& out, Stream& stream) {
  OpArguments check("SwigluBackward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&gate_up, "gate_up", kBf},
                                       {&dout, "dout", kBf},
                                       {&dgate_up, "dgate_up", kBf},
                                       {&out, "out", kBf}}));
  return cuda::SwigluBackward(Bf16(dout), Bf16(gate_up), RowsOf(gate_up), gate_up.shape.back() / 2,
                              MutableBf16(dgate_up),
                              out.data != nullptr ? MutableBf16(out) : nullptr, cuda_stream);
}

absl::Status CudaOps::SiluForward(const Tensor& x, const Tensor& out, const Tensor& out_amax,
                                  Stream& stream) {
  OpArguments check("SiluForward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&x, "x", kBf}, {&out, "out", kBf}}));
  return cuda::SiluForward(Bf16(x), x.numel(), MutableBf16(out), AmaxOrNull(out_amax), cuda_stream);
}

absl::Status CudaOps::SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                                   const Tensor& out, const Tensor& dx_amax, const Tensor& out_amax,
                                   Stream& stream) {
  OpArguments check("SiluBackward (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(
      Dtypes(check, {{&x, "x", kBf}, {&dout, "dout", kBf}, {&dx, "dx", kBf}, {&out, "out", kBf}}));
  return cuda::SiluBackward(Bf16(dout), Bf16(x), x.numel(), MutableBf16(dx), MutableBf16(out),
                            AmaxOrNull(dx_amax), AmaxOrNull(out_amax), cuda_stream);
}

absl::Status CudaOps::Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) {
  OpArguments check("Add (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(a, "a"));
  FSDPD_RETURN_IF_ERROR(Dtypes(check, {{&b, "b", a.dtype}, {&out, "out", a.dtype}}));
  if (a.dtype == DType::kBF16) {
    return cuda::AddBf16(Bf16(a), Bf16(b), a.numel(), MutableBf16(out), cuda_stream);
  }
  return cuda::AddFloat(a.as<float>(), b.as<float>(), a.numel(), out.as<float>(), cuda_stream);
}

absl::Status CudaOps::HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,
                                       double loss_scale, const Tensor& loss, const Tensor& dx,
                                       const Tensor& dhead, Stream& stream) {
  OpArguments check("HeadCrossEntropy (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(Dtypes(
      check, {{&head, "head", kBf}, {&x, "x", kBf}, {&dx, "dx", kBf}, {&dhead, "dhead", kF}}));
  const int64_t vocab = head.shape[0];
  const int64_t tokens = targets.numel();
  const int64_t bytes = cuda::HeadCrossEntropyScratchBytes(tokens, vocab);
  FSDPD_ASSIGN_OR_RETURN(void* scratch, ScratchFor(cuda_stream, bytes));
  return cuda::HeadCrossEntropy(*gemm_, Bf16(x), Bf16(head), targets.as<int32_t>(), tokens,
                                head.shape[1], vocab, static_cast<float>(loss_scale),
                                loss.as<float>(), dx.data != nullptr ? MutableBf16(dx) : nullptr,
                                dhead.data != nullptr ? dhead.as<float>() : nullptr, scratch, bytes,
                                cuda_stream);
}

absl::Status CudaOps::Cast(const Tensor& src, const Tensor& dst, Stream& stream) {
  OpArguments check("Cast (cuda)");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  if (src.dtype == dst.dtype) {
    if (src.numel() == 0 || src.data == dst.data) return absl::OkStatus();
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.bytes()),
                               cudaMemcpyDeviceToDevice, cuda_stream));
    return absl::OkStatus();
  }
  if (src.dtype == DType::kF32 && dst.dtype == DType::kBF16) {
    return cuda::CastFloatToBf16(src.as<float>(), src.numel(), MutableBf16(dst), cuda_stream);
  }
  if (src.dtype == DType::kBF16 && dst.dtype == DType::kF32) {
    return cuda::CastBf16ToFloat(Bf16(src), src.numel(), dst.as<float>(), cuda_stream);
  }
  return check.Error(absl::StrCat("no conversion from ", src.Describe(), " to ", dst.Describe(),
                                  " (only between f32 and bf16)"));
}

// The ops below take f32 or bf16 (CheckedOps checked which).

absl::Status CudaOps::RoundToBf16(const Tensor& x, Stream& stream) {
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  if (x.dtype == DType::kBF16) return absl::OkStatus();  // already bf16 values
  return cuda::RoundFloatToBf16(x.as<float>(), x.numel(), cuda_stream);
}

absl::Status CudaOps::Fill(const Tensor& x, float value, Stream& stream) {
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  if (x.dtype == DType::kBF16) return cuda::FillBf16(MutableBf16(x), x.numel(), value, cuda_stream);
  return cuda::FillFloat(x.as<float>(), x.numel(), value, cuda_stream);
}

absl::Status CudaOps::Scale(const Tensor& x, float factor, Stream& stream) {
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  if (x.dtype == DType::kBF16) {
    return cuda::ScaleBf16(MutableBf16(x), x.numel(), factor, cuda_stream);
  }
  return cuda::ScaleFloat(x.as<float>(), x.numel(), factor, cuda_stream);
}

absl::Status CudaOps::SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) {
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_ASSIGN_OR_RETURN(void* scratch,
                         ScratchFor(cuda_stream, cuda::SumOfSquaresScratchFloats(x.numel()) * 4));
  auto* partials = static_cast<float*>(scratch);
  if (x.dtype == DType::kBF16) {
    return cuda::SumOfSquaresBf16(Bf16(x), x.numel(), partials, result.as<float>(), cuda_stream);
  }
  return cuda::SumOfSquaresFloat(x.as<float>(), x.numel(), partials, result.as<float>(),
                                 cuda_stream);
}

// CheckedOps checked the four f32 shards and the hyperparameters.
absl::Status CudaOps::AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const AdamWParams& params, Stream& stream) {
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  const cuda::AdamWStepParams step = StepParams(params);
  return cuda::AdamWStep(param.as<float>(), grad.as<float>(), exp_avg.as<float>(),
                         exp_avg_sq.as<float>(), param.numel(), step, cuda_stream);
}

// CheckedOps checked the shards, the hyperparameters and the sum's tensor.
absl::Status CudaOps::AdamWWithGradSquareSum(const Tensor& param, const Tensor& grad,
                                             const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                             const AdamWParams& params,
                                             const Tensor& grad_square_sum, Stream& stream) {
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_ASSIGN_OR_RETURN(
      void* scratch, ScratchFor(cuda_stream, cuda::SumOfSquaresScratchFloats(param.numel()) * 4));
  const cuda::AdamWStepParams step = StepParams(params);
  return cuda::AdamWStepWithSquareSum(
      param.as<float>(), grad.as<float>(), exp_avg.as<float>(), exp_avg_sq.as<float>(),
      param.numel(), step, static_cast<float*>(scratch), grad_square_sum.as<float>(), cuda_stream);
}

// CheckedOps checked the halves, the shards, the hyperparameters and the sum's tensor.
absl::Status CudaOps::AdamWSplitMaster(const Tensor& high, const Tensor& low, const Tensor& grad,
                                       const Tensor& exp_avg, const Tensor& exp_avg_sq,
                                       const AdamWParams& params, const Tensor& grad_square_sum,
                                       Stream& stream) {
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  float* partials = nullptr;
  if (grad_square_sum.data != nullptr) {
    FSDPD_ASSIGN_OR_RETURN(
        void* scratch, ScratchFor(cuda_stream, cuda::SumOfSquaresScratchFloats(high.numel()) * 4));
    partials = static_cast<float*>(scratch);
  }
  const cuda::AdamWStepParams step = StepParams(params);
  return cuda::AdamWStepSplit(
      static_cast<uint16_t*>(high.data), static_cast<uint16_t*>(low.data), grad.as<float>(),
      exp_avg.as<float>(), exp_avg_sq.as<float>(), high.numel(), step, partials,
      grad_square_sum.data != nullptr ? grad_square_sum.as<float>() : nullptr, cuda_stream);
}

}  // namespace fsdpd
