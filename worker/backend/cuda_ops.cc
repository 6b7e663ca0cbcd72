#include "worker/backend/cuda_ops.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/cuda_check.h"
#include "base/status_macros.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/silu.h"

namespace fsdpd {
namespace {

using bf16 = __nv_bfloat16;

#define FSDPD_CUDA_OPS_STREAM(name, stream)                         \
  cudaStream_t name = nullptr;                                      \
  do {                                                              \
    absl::StatusOr<cudaStream_t> stream_or_ = CudaStreamOf(stream); \
    if (!stream_or_.ok()) return stream_or_.status();               \
    name = *stream_or_;                                             \
  } while (false)

// Argument checks; each error names the op, the argument and its Describe()d tensor.
class Checker {
 public:
  explicit Checker(const char* op) : op_(op) {}

  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat(op_, " (cuda): ", message));
  }

  absl::Status Typed(const Tensor& t, const char* name, DType dtype) const {
    if (t.data == nullptr) return Error(absl::StrCat(name, " has no data (", t.Describe(), ")"));
    for (int64_t d : t.shape) {
      if (d < 0) return Error(absl::StrCat(name, " has a negative dimension: ", t.Describe()));
    }
    if (t.dtype != dtype) {
      return Error(absl::StrCat(name, " must be ", DTypeName(dtype), ", got ", t.Describe()));
    }
    return absl::OkStatus();
  }

  absl::Status Shaped(const Tensor& t, const char* name, DType dtype,
                      const std::vector<int64_t>& shape) const {
    FSDPD_RETURN_IF_ERROR(Typed(t, name, dtype));
    if (t.shape != shape) {
      return Error(absl::StrCat(name, " must be ", DTypeName(dtype), "[",
                                absl::StrJoin(shape, ", "), "], got ", t.Describe()));
    }
    return absl::OkStatus();
  }

  // `rows` rows of `width` elements (any leading shape).
  absl::Status Rows(const Tensor& t, const char* name, DType dtype, int64_t rows, int64_t width,
                    const std::string& why) const {
    FSDPD_RETURN_IF_ERROR(Typed(t, name, dtype));
    if (t.shape.empty() || t.shape.back() != width || t.numel() != rows * width) {
      return Error(absl::StrCat(name, " must hold ", rows, " rows of ", width, " (", why, "), got ",
                                t.Describe()));
    }
    return absl::OkStatus();
  }

  absl::Status SameCount(const Tensor& t, const char* name, DType dtype, const Tensor& reference,
                         const char* reference_name) const {
    FSDPD_RETURN_IF_ERROR(Typed(t, name, dtype));
    if (t.numel() != reference.numel()) {
      return Error(absl::StrCat(name, " ", t.Describe(), " must have as many elements as ",
                                reference_name, " ", reference.Describe()));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Width(const Tensor& t, const char* name, DType dtype) const {
    FSDPD_RETURN_IF_ERROR(Typed(t, name, dtype));
    if (t.shape.empty() || t.shape.back() <= 0) {
      return Error(absl::StrCat(name, " must have a positive last dimension, got ", t.Describe()));
    }
    return t.shape.back();
  }

  absl::Status Matrix(const Tensor& t, const char* name, DType dtype) const {
    FSDPD_RETURN_IF_ERROR(Typed(t, name, dtype));
    if (t.shape.size() != 2)
      return Error(absl::StrCat(name, " must be a matrix, got ", t.Describe()));
    return absl::OkStatus();
  }

  absl::Status FloatingPoint(const Tensor& t, const char* name) const {
    if (t.dtype == DType::kI32) {
      return Error(absl::StrCat(name, " must be f32 or bf16, got ", t.Describe()));
    }
    return Typed(t, name, t.dtype);
  }

 private:
  const char* op_;
};

int64_t RowsOf(const Tensor& t) {
  return t.shape.empty() ? 0 : t.numel() / std::max<int64_t>(t.shape.back(), 1);
}

const bf16* Bf16(const Tensor& t) { return static_cast<const bf16*>(t.data); }
bf16* MutableBf16(const Tensor& t) { return static_cast<bf16*>(t.data); }

}  // namespace

CudaOps::CudaOps(CudaAllocator* allocator, cuda::Gemm* gemm) : allocator_(allocator), gemm_(gemm) {}

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
  if (!data.ok()) {
    return absl::Status(data.status().code(), absl::StrCat("CUDA ops scratch of ", bytes,
                                                           " bytes: ", data.status().message()));
  }
  scratch.data = *data;
  scratch.bytes = std::max<int64_t>(bytes, 1);
  return scratch.data;
}

absl::Status CudaOps::EmbeddingForward(const Tensor& weight, const Tensor& tokens,
                                       const Tensor& out, Stream& stream) {
  Checker check("EmbeddingForward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight", DType::kBF16));
  FSDPD_RETURN_IF_ERROR(check.Typed(tokens, "tokens", DType::kI32));
  const int64_t dim = weight.shape[1];
  FSDPD_RETURN_IF_ERROR(
      check.Rows(out, "out", DType::kBF16, tokens.numel(), dim, "one row per token"));
  return cuda::EmbeddingForward(Bf16(weight), tokens.as<int32_t>(), tokens.numel(), dim,
                                MutableBf16(out), cuda_stream);
}

absl::Status CudaOps::EmbeddingBackward(const Tensor& dout, const Tensor& tokens,
                                        const Tensor& dweight, Stream& stream) {
  Checker check("EmbeddingBackward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Matrix(dweight, "dweight", DType::kF32));
  FSDPD_RETURN_IF_ERROR(check.Typed(tokens, "tokens", DType::kI32));
  const int64_t dim = dweight.shape[1];
  FSDPD_RETURN_IF_ERROR(
      check.Rows(dout, "dout", DType::kBF16, tokens.numel(), dim, "one row per token"));
  const int64_t bytes = cuda::EmbeddingBackwardScratchBytes(tokens.numel());
  absl::StatusOr<void*> scratch = ScratchFor(cuda_stream, bytes);
  if (!scratch.ok()) return scratch.status();
  return cuda::EmbeddingBackward(Bf16(dout), tokens.as<int32_t>(), tokens.numel(), dim,
                                 dweight.shape[0], dweight.as<float>(), *scratch, bytes,
                                 cuda_stream);
}

absl::Status CudaOps::RmsNormForward(const Tensor& x, const Tensor& weight, double eps,
                                     const Tensor& out, const Tensor& rstd, Stream& stream) {
  Checker check("RmsNormForward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  absl::StatusOr<int64_t> dim = check.Width(x, "x", DType::kBF16);
  if (!dim.ok()) return dim.status();
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Shaped(weight, "weight", DType::kBF16, {*dim}));
  FSDPD_RETURN_IF_ERROR(check.Rows(out, "out", DType::kBF16, rows, *dim, "as x"));
  FSDPD_RETURN_IF_ERROR(check.Typed(rstd, "rstd", DType::kF32));
  if (rstd.numel() != rows) {
    return check.Error(
        absl::StrCat("rstd must have one value per row of x (", rows, "), got ", rstd.Describe()));
  }
  if (!(eps >= 0.0)) return check.Error(absl::StrCat("eps must be >= 0, got ", eps));
  return cuda::RmsNormForward(Bf16(x), Bf16(weight), rows, *dim, static_cast<float>(eps),
                              MutableBf16(out), rstd.as<float>(), cuda_stream);
}

absl::Status CudaOps::RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                                      Stream& stream) {
  Checker check("RmsNormBackward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  absl::StatusOr<int64_t> dim = check.Width(x, "x", DType::kBF16);
  if (!dim.ok()) return dim.status();
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Rows(dout, "dout", DType::kBF16, rows, *dim, "as x"));
  FSDPD_RETURN_IF_ERROR(check.Shaped(weight, "weight", DType::kBF16, {*dim}));
  FSDPD_RETURN_IF_ERROR(check.Typed(rstd, "rstd", DType::kF32));
  if (rstd.numel() != rows) {
    return check.Error(
        absl::StrCat("rstd must have one value per row of x (", rows, "), got ", rstd.Describe()));
  }
  FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", DType::kBF16, rows, *dim, "as x"));
  FSDPD_RETURN_IF_ERROR(check.Shaped(dweight, "dweight", DType::kF32, {*dim}));
  const int64_t bytes = cuda::RmsNormBackwardScratchFloats(rows, *dim) * 4;
  absl::StatusOr<void*> scratch = ScratchFor(cuda_stream, bytes);
  if (!scratch.ok()) return scratch.status();
  return cuda::RmsNormBackward(Bf16(dout), Bf16(x), Bf16(weight), rstd.as<float>(), rows, *dim,
                               MutableBf16(dx), dweight.as<float>(), static_cast<float*>(*scratch),
                               cuda_stream);
}

absl::Status CudaOps::LinearForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& out, Stream& stream) {
  Checker check("LinearForward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight", DType::kBF16));
  const int64_t out_features = weight.shape[0];
  const int64_t in_features = weight.shape[1];
  FSDPD_RETURN_IF_ERROR(check.Typed(x, "x", DType::kBF16));
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Rows(x, "x", DType::kBF16, rows, in_features,
                                   absl::StrCat("weight is ", weight.Describe())));
  if (bias.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Shaped(bias, "bias", DType::kBF16, {out_features}));
  }
  FSDPD_RETURN_IF_ERROR(
      check.Rows(out, "out", DType::kBF16, rows, out_features,
                 absl::StrCat("x is ", x.Describe(), ", weight is ", weight.Describe())));
  if (rows == 0) return absl::OkStatus();
  return gemm_->LinearForward(Bf16(x), Bf16(weight), bias.data != nullptr ? Bf16(bias) : nullptr,
                              rows, out_features, in_features, MutableBf16(out), cuda_stream);
}

absl::Status CudaOps::LinearBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     Stream& stream) {
  Checker check("LinearBackward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Matrix(weight, "weight", DType::kBF16));
  const int64_t out_features = weight.shape[0];
  const int64_t in_features = weight.shape[1];
  FSDPD_RETURN_IF_ERROR(check.Typed(x, "x", DType::kBF16));
  const int64_t rows = RowsOf(x);
  FSDPD_RETURN_IF_ERROR(check.Rows(x, "x", DType::kBF16, rows, in_features,
                                   absl::StrCat("weight is ", weight.Describe())));
  FSDPD_RETURN_IF_ERROR(
      check.Rows(dout, "dout", DType::kBF16, rows, out_features,
                 absl::StrCat("x is ", x.Describe(), ", weight is ", weight.Describe())));
  if (dx.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", DType::kBF16, rows, in_features, "the shape of x"));
  }
  if (dweight.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Shaped(dweight, "dweight", DType::kF32, weight.shape));
  }
  if (dbias.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Shaped(dbias, "dbias", DType::kF32, {out_features}));
    if (dweight.data == nullptr) {
      return check.Error(
          "dbias without dweight is not supported: the bias gradient is fused "
          "into the weight-gradient product");
    }
  }
  if (rows == 0) return absl::OkStatus();
  if (dx.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(gemm_->LinearInputGradient(Bf16(dout), Bf16(weight), rows, out_features,
                                                     in_features, MutableBf16(dx), cuda_stream));
  }
  if (dweight.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(gemm_->LinearWeightGradient(
        Bf16(dout), Bf16(x), rows, out_features, in_features, dweight.as<float>(),
        dbias.data != nullptr ? dbias.as<float>() : nullptr, cuda_stream));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<cuda::AttentionDims> AttentionDimsOf(const Checker& check, const Tensor& qkv,
                                                    int64_t heads, const Tensor& out,
                                                    const Tensor& lse) {
  FSDPD_RETURN_IF_ERROR(check.Typed(qkv, "qkv", DType::kBF16));
  if (qkv.shape.size() != 3 || qkv.shape[2] % 3 != 0) {
    return check.Error(absl::StrCat("qkv must be [batch, seq, 3·dim], got ", qkv.Describe()));
  }
  cuda::AttentionDims dims{qkv.shape[0], qkv.shape[1], heads, qkv.shape[2] / 3};
  if (heads <= 0 || dims.dim % heads != 0) {
    return check.Error(absl::StrCat("heads (", heads, ") must be positive and divide dim ",
                                    dims.dim, " of qkv ", qkv.Describe()));
  }
  if (dims.dim / heads > cuda::kMaxAttentionHeadDim) {
    return check.Error(
        absl::StrCat("head_dim ", dims.dim / heads, " exceeds ", cuda::kMaxAttentionHeadDim));
  }
  FSDPD_RETURN_IF_ERROR(check.Shaped(out, "out", DType::kBF16, {dims.batch, dims.seq, dims.dim}));
  FSDPD_RETURN_IF_ERROR(check.Shaped(lse, "lse", DType::kF32, {dims.batch, heads, dims.seq}));
  return dims;
}

}  // namespace

absl::Status CudaOps::AttentionForward(const Tensor& qkv, int64_t heads, bool causal,
                                       const Tensor& out, const Tensor& lse, Stream& stream) {
  Checker check("AttentionForward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  absl::StatusOr<cuda::AttentionDims> dims = AttentionDimsOf(check, qkv, heads, out, lse);
  if (!dims.ok()) return dims.status();
  if (dims->batch == 0 || dims->seq == 0) return absl::OkStatus();
  absl::StatusOr<cuda::AttentionWorkspace> workspace = cuda::AttentionWorkspaceBytes(*dims, causal);
  if (!workspace.ok()) return workspace.status();
  void* scratch_pointer = nullptr;
  if (workspace->forward_bytes > 0) {
    absl::StatusOr<void*> scratch = ScratchFor(cuda_stream, workspace->forward_bytes);
    if (!scratch.ok()) return scratch.status();
    scratch_pointer = *scratch;
  }
  return cuda::AttentionForward(Bf16(qkv), *dims, causal, MutableBf16(out), lse.as<float>(),
                                scratch_pointer, workspace->forward_bytes, cuda_stream);
}

absl::Status CudaOps::AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                        const Tensor& lse, int64_t heads, bool causal,
                                        const Tensor& dqkv, Stream& stream) {
  Checker check("AttentionBackward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  absl::StatusOr<cuda::AttentionDims> dims = AttentionDimsOf(check, qkv, heads, out, lse);
  if (!dims.ok()) return dims.status();
  FSDPD_RETURN_IF_ERROR(check.Shaped(dout, "dout", DType::kBF16, out.shape));
  FSDPD_RETURN_IF_ERROR(check.Shaped(dqkv, "dqkv", DType::kBF16, qkv.shape));
  if (dims->batch == 0 || dims->seq == 0) return absl::OkStatus();
  absl::StatusOr<cuda::AttentionWorkspace> workspace = cuda::AttentionWorkspaceBytes(*dims, causal);
  if (!workspace.ok()) return workspace.status();
  const int64_t bytes = std::max<int64_t>(workspace->backward_bytes, 1);
  absl::StatusOr<void*> scratch = ScratchFor(cuda_stream, bytes);
  if (!scratch.ok()) return scratch.status();
  return cuda::AttentionBackward(Bf16(dout), Bf16(qkv), Bf16(out), lse.as<float>(), *dims, causal,
                                 MutableBf16(dqkv), *scratch, bytes, cuda_stream);
}

absl::Status CudaOps::SiluForward(const Tensor& x, const Tensor& out, Stream& stream) {
  Checker check("SiluForward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Typed(x, "x", DType::kBF16));
  FSDPD_RETURN_IF_ERROR(check.SameCount(out, "out", DType::kBF16, x, "x"));
  return cuda::SiluForward(Bf16(x), x.numel(), MutableBf16(out), cuda_stream);
}

absl::Status CudaOps::SiluBackward(const Tensor& dout, const Tensor& x, const Tensor& dx,
                                   Stream& stream) {
  Checker check("SiluBackward");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Typed(x, "x", DType::kBF16));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dout, "dout", DType::kBF16, x, "x"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dx, "dx", DType::kBF16, x, "x"));
  return cuda::SiluBackward(Bf16(dout), Bf16(x), x.numel(), MutableBf16(dx), cuda_stream);
}

absl::Status CudaOps::Add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) {
  Checker check("Add");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(b, "b", a.dtype, a, "a"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(out, "out", a.dtype, a, "a"));
  if (a.dtype == DType::kBF16) {
    return cuda::AddBf16(Bf16(a), Bf16(b), a.numel(), MutableBf16(out), cuda_stream);
  }
  return cuda::AddFloat(a.as<float>(), b.as<float>(), a.numel(), out.as<float>(), cuda_stream);
}

absl::Status CudaOps::HeadCrossEntropy(const Tensor& x, const Tensor& head, const Tensor& targets,
                                       double loss_scale, const Tensor& loss, const Tensor& dx,
                                       const Tensor& dhead, Stream& stream) {
  Checker check("HeadCrossEntropy");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Matrix(head, "head", DType::kBF16));
  const int64_t vocab = head.shape[0];
  const int64_t dim = head.shape[1];
  FSDPD_RETURN_IF_ERROR(check.Typed(targets, "targets", DType::kI32));
  const int64_t tokens = targets.numel();
  FSDPD_RETURN_IF_ERROR(check.Rows(
      x, "x", DType::kBF16, tokens, dim,
      absl::StrCat("one row per target of ", targets.Describe(), ", head is ", head.Describe())));
  FSDPD_RETURN_IF_ERROR(check.Typed(loss, "loss", DType::kF32));
  if (loss.numel() != 1) {
    return check.Error(absl::StrCat("loss must be a single value, got ", loss.Describe()));
  }
  if (dx.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Rows(dx, "dx", DType::kBF16, tokens, dim, "as x"));
  }
  if (dhead.data != nullptr) {
    FSDPD_RETURN_IF_ERROR(check.Shaped(dhead, "dhead", DType::kF32, head.shape));
  }
  if (tokens == 0) return check.Error("the mean over zero tokens is undefined");
  const int64_t bytes = cuda::HeadCrossEntropyScratchBytes(tokens, vocab);
  absl::StatusOr<void*> scratch = ScratchFor(cuda_stream, bytes);
  if (!scratch.ok()) return scratch.status();
  return cuda::HeadCrossEntropy(*gemm_, Bf16(x), Bf16(head), targets.as<int32_t>(), tokens, dim,
                                vocab, static_cast<float>(loss_scale), loss.as<float>(),
                                dx.data != nullptr ? MutableBf16(dx) : nullptr,
                                dhead.data != nullptr ? dhead.as<float>() : nullptr, *scratch,
                                bytes, cuda_stream);
}

absl::Status CudaOps::Cast(const Tensor& src, const Tensor& dst, Stream& stream) {
  Checker check("Cast");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Typed(src, "src", src.dtype));
  FSDPD_RETURN_IF_ERROR(check.SameCount(dst, "dst", dst.dtype, src, "src"));
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

absl::Status CudaOps::RoundToBf16(const Tensor& x, Stream& stream) {
  Checker check("RoundToBf16");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  if (x.dtype == DType::kBF16) return absl::OkStatus();  // already bf16 values
  return cuda::RoundFloatToBf16(x.as<float>(), x.numel(), cuda_stream);
}

absl::Status CudaOps::Fill(const Tensor& x, float value, Stream& stream) {
  Checker check("Fill");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  if (x.dtype == DType::kBF16) return cuda::FillBf16(MutableBf16(x), x.numel(), value, cuda_stream);
  return cuda::FillFloat(x.as<float>(), x.numel(), value, cuda_stream);
}

absl::Status CudaOps::Scale(const Tensor& x, float factor, Stream& stream) {
  Checker check("Scale");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  if (x.dtype == DType::kBF16) {
    return cuda::ScaleBf16(MutableBf16(x), x.numel(), factor, cuda_stream);
  }
  return cuda::ScaleFloat(x.as<float>(), x.numel(), factor, cuda_stream);
}

absl::Status CudaOps::SumOfSquares(const Tensor& x, const Tensor& result, Stream& stream) {
  Checker check("SumOfSquares");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.FloatingPoint(x, "x"));
  FSDPD_RETURN_IF_ERROR(check.Typed(result, "result", DType::kF32));
  if (result.numel() != 1) {
    return check.Error(absl::StrCat("result must be a single value, got ", result.Describe()));
  }
  absl::StatusOr<void*> scratch = ScratchFor(cuda_stream, cuda::SumOfSquaresScratchFloats() * 4);
  if (!scratch.ok()) return scratch.status();
  auto* partials = static_cast<float*>(*scratch);
  if (x.dtype == DType::kBF16) {
    return cuda::SumOfSquaresBf16(Bf16(x), x.numel(), partials, result.as<float>(), cuda_stream);
  }
  return cuda::SumOfSquaresFloat(x.as<float>(), x.numel(), partials, result.as<float>(),
                                 cuda_stream);
}

absl::Status CudaOps::AdamW(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const AdamWParams& params, Stream& stream) {
  Checker check("AdamW");
  FSDPD_CUDA_OPS_STREAM(cuda_stream, stream);
  FSDPD_RETURN_IF_ERROR(check.Typed(param, "param", DType::kF32));
  FSDPD_RETURN_IF_ERROR(check.SameCount(grad, "grad", DType::kF32, param, "param"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(exp_avg, "exp_avg", DType::kF32, param, "param"));
  FSDPD_RETURN_IF_ERROR(check.SameCount(exp_avg_sq, "exp_avg_sq", DType::kF32, param, "param"));
  if (params.step < 1) return check.Error(absl::StrCat("step must be >= 1, got ", params.step));
  if (!(params.lr >= 0.0)) return check.Error(absl::StrCat("lr must be >= 0, got ", params.lr));
  if (!(params.beta1 >= 0.0 && params.beta1 < 1.0) ||
      !(params.beta2 >= 0.0 && params.beta2 < 1.0)) {
    return check.Error(
        absl::StrCat("betas must lie in [0, 1), got ", params.beta1, " and ", params.beta2));
  }
  if (!(params.eps >= 0.0)) return check.Error(absl::StrCat("eps must be >= 0, got ", params.eps));
  if (!(params.weight_decay >= 0.0)) {
    return check.Error(absl::StrCat("weight_decay must be >= 0, got ", params.weight_decay));
  }
  cuda::AdamWStepParams step{params.lr,  params.beta1,        params.beta2,
                             params.eps, params.weight_decay, params.step};
  return cuda::AdamWStep(param.as<float>(), grad.as<float>(), exp_avg.as<float>(),
                         exp_avg_sq.as<float>(), param.numel(), step, cuda_stream);
}

}  // namespace fsdpd
