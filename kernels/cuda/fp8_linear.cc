#include "kernels/cuda/fp8_linear.h"

#include "base/cuda_check.h"
#include "base/status_macros.h"
#include "kernels/cuda/column_sum.h"
#include "kernels/cuda/fp8.h"
#include "kernels/cuda/gemm.h"

namespace fsdpd::cuda {
namespace {

constexpr int64_t kAlign = 256;
// Per operand: amax, scale and descale, each at its own 16 bytes (the descale pointers must be
// 16-byte aligned: kernels/cuda/fp8_gemm.h); three operands at most.
constexpr int64_t kScalarsBytes = 48;
constexpr int64_t kSlotsBytes = kAlign;

int64_t Aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct Slot {
  float* amax;
  float* scale;
  float* descale;
};

Slot SlotAt(void* scratch, int index) {
  float* base = reinterpret_cast<float*>(static_cast<char*>(scratch) + index * kScalarsBytes);
  return Slot{base, base + 4, base + 8};
}

// Cuts fp8 buffers out of the scratch after the slots, in order.
class Carver {
 public:
  explicit Carver(void* scratch) : next_(static_cast<uint8_t*>(scratch) + kSlotsBytes) {}
  uint8_t* Take(int64_t bytes) {
    uint8_t* taken = next_;
    next_ += Aligned(bytes);
    return taken;
  }

 private:
  uint8_t* next_;
};

// The amax of in (known_amax where the producer of in left it, else a pass of its own), scale
// and descale, then the fp8 copies asked for.
absl::Status Quantize(const __nv_bfloat16* in, int64_t rows, int64_t cols, Fp8Format format,
                      const Slot& slot, const float* known_amax, uint8_t* out,
                      uint8_t* out_transposed, cudaStream_t stream) {
  const float* amax = known_amax;
  if (amax == nullptr) {
    FSDPD_RETURN_IF_ERROR(
        CastToFp8(in, rows, cols, format, nullptr, nullptr, nullptr, slot.amax, stream));
    amax = slot.amax;
  }
  FSDPD_RETURN_IF_ERROR(Fp8ScaleFromAmax(amax, format, slot.scale, slot.descale, stream));
  return CastToFp8(in, rows, cols, format, slot.scale, out, out_transposed, nullptr, stream);
}

absl::Status ZeroAmaxes(void* scratch, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(scratch, 0, static_cast<size_t>(kSlotsBytes), stream));
  return absl::OkStatus();
}

}  // namespace

int64_t Fp8LinearForwardScratchBytes(int64_t m, int64_t n, int64_t k) {
  return kSlotsBytes + Aligned(m * k) + Aligned(n * k);
}

int64_t Fp8LinearBackwardScratchBytes(int64_t m, int64_t n, int64_t k) {
  return kSlotsBytes + 2 * Aligned(m * n) + Aligned(n * k) + Aligned(m * k) +
         Aligned(ColumnSumScratchFloats(m, n) * 4);
}

absl::Status Fp8LinearForward(Fp8Gemm& gemm, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                              const __nv_bfloat16* bias, int64_t m, int64_t n, int64_t k,
                              __nv_bfloat16* out, const float* x_amax, void* scratch,
                              cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(ZeroAmaxes(scratch, stream));
  Carver carver(scratch);
  const Slot x_slot = SlotAt(scratch, 0), w_slot = SlotAt(scratch, 1);
  uint8_t* x8 = carver.Take(m * k);
  uint8_t* w8 = carver.Take(n * k);
  FSDPD_RETURN_IF_ERROR(Quantize(x, m, k, Fp8Format::kE4M3, x_slot, x_amax, x8, nullptr, stream));
  FSDPD_RETURN_IF_ERROR(
      Quantize(weight, n, k, Fp8Format::kE4M3, w_slot, nullptr, w8, nullptr, stream));
  FSDPD_RETURN_IF_ERROR(gemm.Forward({x8, Fp8Format::kE4M3, x_slot.descale},
                                     {w8, Fp8Format::kE4M3, w_slot.descale}, m, n, k, out, stream));
  if (bias == nullptr) return absl::OkStatus();
  return AddBiasBf16(out, bias, m, n, stream);
}

absl::Status Fp8LinearBackward(Fp8Gemm& gemm, const __nv_bfloat16* dout, const __nv_bfloat16* x,
                               const __nv_bfloat16* weight, int64_t m, int64_t n, int64_t k,
                               __nv_bfloat16* dx, float* dweight, float* dbias, bool accumulate,
                               const float* dout_amax, const float* x_amax, void* scratch,
                               cudaStream_t stream) {
  FSDPD_RETURN_IF_ERROR(ZeroAmaxes(scratch, stream));
  Carver carver(scratch);
  const Slot d_slot = SlotAt(scratch, 0), w_slot = SlotAt(scratch, 1), x_slot = SlotAt(scratch, 2);
  uint8_t* d8 = carver.Take(m * n);
  uint8_t* d8_transposed = carver.Take(m * n);
  uint8_t* w8_transposed = carver.Take(n * k);
  uint8_t* x8_transposed = carver.Take(m * k);
  float* column_partials = reinterpret_cast<float*>(carver.Take(ColumnSumScratchFloats(m, n) * 4));
  if (dx != nullptr || dweight != nullptr) {
    FSDPD_RETURN_IF_ERROR(Quantize(dout, m, n, Fp8Format::kE5M2, d_slot, dout_amax,
                                   dx != nullptr ? d8 : nullptr,
                                   dweight != nullptr ? d8_transposed : nullptr, stream));
  }
  if (dx != nullptr) {
    FSDPD_RETURN_IF_ERROR(
        Quantize(weight, n, k, Fp8Format::kE4M3, w_slot, nullptr, nullptr, w8_transposed, stream));
    FSDPD_RETURN_IF_ERROR(gemm.InputGradient({d8, Fp8Format::kE5M2, d_slot.descale},
                                             {w8_transposed, Fp8Format::kE4M3, w_slot.descale}, m,
                                             n, k, dx, stream));
  }
  if (dweight != nullptr) {
    FSDPD_RETURN_IF_ERROR(
        Quantize(x, m, k, Fp8Format::kE4M3, x_slot, x_amax, nullptr, x8_transposed, stream));
    FSDPD_RETURN_IF_ERROR(gemm.WeightGradient({d8_transposed, Fp8Format::kE5M2, d_slot.descale},
                                              {x8_transposed, Fp8Format::kE4M3, x_slot.descale}, m,
                                              n, k, dweight, stream, accumulate));
  }
  if (dbias == nullptr) return absl::OkStatus();
  return ColumnSumBf16(dout, m, n, accumulate, dbias, column_partials, stream);
}

}  // namespace fsdpd::cuda
