// The FP8 primitives (kernels/cuda/fp8.h, kernels/cuda/fp8_gemm.h) against the host: the cast
// and its transpose to the bit, the amax exactly, the scale helper's edge cases, and the three
// products of a linear layer within a derived bound, on outputs poisoned with NaN bytes.
#include <cuda_fp8.h>

#include <cfloat>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/fp8.h"
#include "kernels/cuda/fp8_gemm.h"
#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

using cuda::Fp8Format;

// An fp8 byte's value, decoded here rather than by cuda_fp8.h (whose encoder gives the
// expected bytes), so that the two sides of the comparisons share no code.
double DecodeFp8(uint8_t q, Fp8Format format) {
  const int mantissa_bits = format == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = format == Fp8Format::kE4M3 ? 7 : 15;
  const int exponent_mask = format == Fp8Format::kE4M3 ? 0xf : 0x1f;
  const int exponent = (q >> mantissa_bits) & exponent_mask;
  const int mantissa = q & ((1 << mantissa_bits) - 1);
  const double sign = (q & 0x80) != 0 ? -1.0 : 1.0;
  if (format == Fp8Format::kE4M3 ? (exponent == 0xf && mantissa == 7) : exponent == 0x1f) {
    return mantissa == 0 ? sign * INFINITY : NAN;
  }
  const double fraction = static_cast<double>(mantissa) / (1 << mantissa_bits);
  if (exponent == 0) return sign * std::ldexp(fraction, 1 - bias);
  return sign * std::ldexp(1.0 + fraction, exponent - bias);
}

// What the device cast writes for a bf16 value x: fp8(fp32(x · scale)), round to nearest even,
// saturating. The product is one IEEE fp32 multiplication on both sides.
uint8_t ExpectedFp8(float x, float scale, Fp8Format format) {
  return __nv_cvt_float_to_fp8(x * scale, __NV_SATFINITE,
                               format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2);
}

class CudaFp8Test : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (const std::string reason = WithoutFp8TensorCores(); !reason.empty()) GTEST_SKIP() << reason;
    stream_ = static_cast<CudaStream&>(gpu_stream()).get();
  }

  // Every copy and fill goes through the backend's compute stream, which does not synchronise
  // with the legacy default stream (it is created non-blocking).
  void Poison(void* data, int64_t bytes) {
    EXPECT_EQ(cudaMemsetAsync(data, 0xff, static_cast<size_t>(bytes), stream_), cudaSuccess);
  }

  // Device memory of `bytes`, filled with 0xff: NaN as bf16, fp32, e4m3 and e5m2 alike.
  template <typename T>
  T* Poisoned(int64_t bytes) {
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = cuda_->Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return nullptr;
    void* data = (*buffer)->data();
    buffers_.push_back(std::move(*buffer));
    Poison(data, bytes);
    return static_cast<T*>(data);
  }

  template <typename T>
  T* UploadRaw(const std::vector<T>& values) {
    T* device = Poisoned<T>(static_cast<int64_t>(values.size() * sizeof(T)));
    EXPECT_EQ(cudaMemcpyAsync(device, values.data(), values.size() * sizeof(T),
                              cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);  // `values` may go out of scope
    return device;
  }

  __nv_bfloat16* UploadBf16(const std::vector<float>& values) {
    std::vector<uint16_t> bits(values.size());
    cpu::CastFloat32ToBfloat16(values.data(), static_cast<int64_t>(values.size()), bits.data());
    return reinterpret_cast<__nv_bfloat16*>(UploadRaw(bits));
  }

  template <typename T>
  std::vector<T> DownloadRaw(const T* device, int64_t count) {
    std::vector<T> host(static_cast<size_t>(count));
    EXPECT_EQ(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost,
                              stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return host;
  }

  float DownloadFloat(const float* device) { return DownloadRaw(device, 1)[0]; }

  cudaStream_t stream_ = nullptr;
};

struct CastCase {
  int64_t rows, cols;
  Fp8Format format;
};

class CudaFp8CastTest : public CudaFp8Test, public ::testing::WithParamInterface<CastCase> {};

// The cast with a fixed scale that sends the largest values past Fp8Max (saturation), the
// smallest below the format's denormals (zeros), then with the scale Fp8ScaleFromAmax gives.
TEST_P(CudaFp8CastTest, MatchesTheHostToTheBitWithTransposeAndAmax) {
  const CastCase c = GetParam();
  const int64_t count = c.rows * c.cols;
  std::vector<float> values = RandomValues(random_, count, 3.0f);
  values[0] = 0.0f;
  values[1] = -0.0f;
  values[2] = 1e-30f;
  values[count - 1] = -1e4f;  // the amax, and past Fp8Max at the fixed scale below
  values[count / 2] = 6e-3f;
  values = RoundedToBf16(values);
  float expected_amax = 0.0f;
  for (float v : values) expected_amax = std::max(expected_amax, std::fabs(v));

  const __nv_bfloat16* in = UploadBf16(values);
  const float fixed_scale = c.format == Fp8Format::kE4M3 ? 50.0f : 8000.0f;
  float* scalars = UploadRaw(std::vector<float>{0.0f, fixed_scale, 0.0f});  // amax, scale, inv
  uint8_t* out = Poisoned<uint8_t>(count);
  uint8_t* out_t = Poisoned<uint8_t>(count);

  ASSERT_TRUE(
      cuda::CastToFp8(in, c.rows, c.cols, c.format, scalars + 1, out, out_t, scalars, stream_)
          .ok());
  auto check = [&](float scale) {
    const std::vector<uint8_t> got = DownloadRaw(out, count);
    const std::vector<uint8_t> got_t = DownloadRaw(out_t, count);
    int64_t mismatches = 0, transpose_mismatches = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t col = 0; col < c.cols; ++col) {
        const uint8_t expected = ExpectedFp8(values[r * c.cols + col], scale, c.format);
        if (got[r * c.cols + col] != expected && mismatches++ < 5) {
          ADD_FAILURE() << "out[" << r << ", " << col << "] = 0x" << std::hex
                        << int{got[r * c.cols + col]} << ", expected 0x" << int{expected}
                        << std::dec << " for " << values[r * c.cols + col] << " · " << scale;
        }
        if (got_t[col * c.rows + r] != expected && transpose_mismatches++ < 5) {
          ADD_FAILURE() << "out_transposed[" << col << ", " << r << "] = 0x" << std::hex
                        << int{got_t[col * c.rows + r]} << ", expected 0x" << int{expected};
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(transpose_mismatches, 0);
  };
  check(fixed_scale);
  const std::vector<uint8_t> saturated = DownloadRaw(out, count);
  EXPECT_EQ(DecodeFp8(saturated[count - 1], c.format), -cuda::Fp8Max(c.format));
  EXPECT_EQ(DownloadFloat(scalars), expected_amax);

  // The scale from the amax, then the cast with it: the amax lands on -Fp8Max exactly
  // (amax · (Fp8Max / amax) is within an ulp of Fp8Max), nothing saturates beyond it.
  ASSERT_TRUE(cuda::Fp8ScaleFromAmax(scalars, c.format, scalars + 1, scalars + 2, stream_).ok());
  const std::vector<float> scale = DownloadRaw(scalars, 3);
  const float expected_scale = cuda::Fp8Max(c.format) / expected_amax;
  EXPECT_EQ(scale[1], expected_scale);
  EXPECT_EQ(scale[2], 1.0f / expected_scale);
  Poison(out, count);
  Poison(out_t, count);
  ASSERT_TRUE(
      cuda::CastToFp8(in, c.rows, c.cols, c.format, scalars + 1, out, out_t, scalars, stream_)
          .ok());
  check(scale[1]);
  EXPECT_EQ(DecodeFp8(DownloadRaw(out, count)[count - 1], c.format), -cuda::Fp8Max(c.format));
  EXPECT_EQ(DownloadFloat(scalars), expected_amax);  // the max with itself
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFp8CastTest,
                         ::testing::Values(CastCase{64, 64, Fp8Format::kE4M3},     // one tile
                                           CastCase{80, 144, Fp8Format::kE4M3},    // ragged tiles
                                           CastCase{80, 144, Fp8Format::kE5M2},    // e5m2
                                           CastCase{256, 512, Fp8Format::kE5M2},   // many tiles
                                           CastCase{16, 208, Fp8Format::kE4M3}));  // one short row

TEST_F(CudaFp8Test, AmaxAloneAndTheRowMajorCastAlone) {
  const int64_t rows = 40, cols = 48;  // rows not a multiple of 16: no transpose allowed
  std::vector<float> values = RoundedToBf16(RandomValues(random_, rows * cols));
  float expected_amax = 0.0f;
  for (float v : values) expected_amax = std::max(expected_amax, std::fabs(v));
  const __nv_bfloat16* in = UploadBf16(values);
  float* scalars = UploadRaw(std::vector<float>{0.0f, 7.0f});
  ASSERT_TRUE(
      cuda::CastToFp8(in, rows, cols, Fp8Format::kE4M3, nullptr, nullptr, nullptr, scalars, stream_)
          .ok());
  EXPECT_EQ(DownloadFloat(scalars), expected_amax);

  uint8_t* out = Poisoned<uint8_t>(rows * cols);
  ASSERT_TRUE(
      cuda::CastToFp8(in, rows, cols, Fp8Format::kE4M3, scalars + 1, out, nullptr, nullptr, stream_)
          .ok());
  const std::vector<uint8_t> got = DownloadRaw(out, rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    ASSERT_EQ(got[i], ExpectedFp8(values[i], 7.0f, Fp8Format::kE4M3)) << "at " << i;
  }
  absl::Status transposed =
      cuda::CastToFp8(in, rows, cols, Fp8Format::kE4M3, scalars + 1, out, out, nullptr, stream_);
  EXPECT_EQ(transposed.code(), absl::StatusCode::kInvalidArgument) << transposed;
  absl::Status ragged =
      cuda::CastToFp8(in, rows, 40, Fp8Format::kE4M3, scalars + 1, out, nullptr, nullptr, stream_);
  EXPECT_EQ(ragged.code(), absl::StatusCode::kInvalidArgument) << ragged;
  EXPECT_NE(ragged.message().find("multiple of 16"), std::string::npos) << ragged;
}

// A NaN or an infinity in the input reaches the amax (so that the scale is NaN and the
// overflow shows), whatever the other values.
TEST_F(CudaFp8Test, AmaxPropagatesNanAndInfinity) {
  const int64_t rows = 32, cols = 64;
  for (const uint16_t special : {uint16_t{0x7fc0}, uint16_t{0xffc1}, uint16_t{0xff80}}) {
    std::vector<uint16_t> bits(rows * cols, 0x3f80);  // 1.0
    bits[rows * cols / 3] = special;
    bits[5] = 0x4700;  // 32768
    const auto* in = reinterpret_cast<const __nv_bfloat16*>(UploadRaw(bits));
    float* amax = UploadRaw(std::vector<float>{0.0f});
    ASSERT_TRUE(
        cuda::CastToFp8(in, rows, cols, Fp8Format::kE4M3, nullptr, nullptr, nullptr, amax, stream_)
            .ok());
    const float got = DownloadFloat(amax);
    if (special == 0xff80) {
      EXPECT_EQ(got, INFINITY);
    } else {
      EXPECT_TRUE(std::isnan(got)) << got;
    }
  }
}

TEST_F(CudaFp8Test, ScaleFromAmaxEdgeCases) {
  struct Case {
    float amax;
    Fp8Format format;
    float scale;  // NaN: expect NaN scale and inverse
  };
  const Case cases[] = {
      {2.0f, Fp8Format::kE4M3, 224.0f},    {3.0f, Fp8Format::kE5M2, 57344.0f / 3.0f},
      {0.0f, Fp8Format::kE4M3, 1.0f},       // all zeros: any scale, 1
      {1e-39f, Fp8Format::kE4M3, FLT_MAX},  // 448 / denormal overflows: clamped
      {INFINITY, Fp8Format::kE4M3, NAN},    // overflow upstream: NaN, not saturation
      {NAN, Fp8Format::kE5M2, NAN},
  };
  for (const Case& c : cases) {
    float* scalars = UploadRaw(std::vector<float>{c.amax, -1.0f, -1.0f});
    ASSERT_TRUE(cuda::Fp8ScaleFromAmax(scalars, c.format, scalars + 1, scalars + 2, stream_).ok());
    const std::vector<float> got = DownloadRaw(scalars, 3);
    if (std::isnan(c.scale)) {
      EXPECT_TRUE(std::isnan(got[1]) && std::isnan(got[2])) << "amax " << c.amax;
    } else {
      EXPECT_EQ(got[1], c.scale) << "amax " << c.amax;
      EXPECT_EQ(got[2], 1.0f / c.scale) << "amax " << c.amax;
    }
  }
}

// A tensor cast as a step casts it (amax pass, scale, cast with transpose), and its bytes and
// descale read back for the host reference.
struct Quantized {
  uint8_t* data = nullptr;
  uint8_t* transposed = nullptr;
  float* scalars = nullptr;  // amax, scale, descale, 16 bytes apart (cuBLASLt's alignment)
  Fp8Format format;
  std::vector<double> values;  // decoded row-major values, descale not applied
  double descale = 0.0;

  cuda::Fp8Operand Plain() const { return {data, format, scalars + 8}; }
  cuda::Fp8Operand Transposed() const { return {transposed, format, scalars + 8}; }
};

struct GemmCase {
  int64_t tokens, out_features, in_features;  // T, N, K
  Fp8Format grad_format;
};

class CudaFp8GemmTest : public CudaFp8Test, public ::testing::WithParamInterface<GemmCase> {
 protected:
  Quantized Quantize(const std::vector<float>& values, int64_t rows, int64_t cols,
                     Fp8Format format) {
    Quantized q;
    q.format = format;
    const __nv_bfloat16* in = UploadBf16(values);
    q.scalars = UploadRaw(std::vector<float>(12, 0.0f));
    q.data = Poisoned<uint8_t>(rows * cols);
    q.transposed = Poisoned<uint8_t>(rows * cols);
    EXPECT_TRUE(
        cuda::CastToFp8(in, rows, cols, format, nullptr, nullptr, nullptr, q.scalars, stream_)
            .ok());
    EXPECT_TRUE(
        cuda::Fp8ScaleFromAmax(q.scalars, format, q.scalars + 4, q.scalars + 8, stream_).ok());
    EXPECT_TRUE(cuda::CastToFp8(in, rows, cols, format, q.scalars + 4, q.data, q.transposed,
                                nullptr, stream_)
                    .ok());
    const std::vector<uint8_t> bytes = DownloadRaw(q.data, rows * cols);
    q.values.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) q.values[i] = DecodeFp8(bytes[i], format);
    q.descale = DownloadRaw(q.scalars, 12)[8];
    return q;
  }

  std::unique_ptr<cuda::Fp8Gemm> NewGemm() {
    const cuda::Fp8GemmConfig config;
    void* workspace = Poisoned<uint8_t>(config.workspace_bytes);
    absl::StatusOr<std::unique_ptr<cuda::Fp8Gemm>> gemm = cuda::Fp8Gemm::Create(workspace, config);
    EXPECT_TRUE(gemm.ok()) << gemm.status();
    return gemm.ok() ? std::move(*gemm) : nullptr;
  }
};

// The reference and the bound of out[i, j] = s · Σ_d left[i, d] · right[j, d] (+ start), from
// the decoded fp8 values (products of fp8 values are exact in double and in the tensor cores).
//
// The bound: the tensor cores add the products into an accumulator that keeps fewer bits than
// fp32 (13 or more fraction bits on Hopper), a group of at least 16 products (one k-step of an
// FP8 MMA) at a time, each addition off by at most 2^-13 of the largest magnitude taking part,
// which is at most Σ|terms| so far; cuBLASLt promotes the partial sums into fp32 now and then
// (2^-24 relative each). Over ⌈depth / 16⌉ groups that is at most
// ⌈depth / 16⌉·2^-13·s·Σ|left·right| (2^-8·s·Σ|·| at depth 512) whether or not it promotes, plus
// depth·2^-24·s·Σ|·| for fp32 additions. The descales are applied in fp32 (three roundings,
// 2^-22 of the value), the bf16 output rounds once more (2^-9 of the value), and an accumulated
// fp32 output adds one fp32 rounding (2^-24). Random data typically sit far inside this bound;
// what it must catch, a wrong layout, operand, descale or format, or a missed element, is off by
// the order of the values themselves (or NaN from the poison).
::testing::AssertionResult MatchesProduct(const std::vector<float>& got,
                                          const std::vector<double>& left,
                                          const std::vector<double>& right, int64_t rows,
                                          int64_t cols, int64_t depth, double s, bool bf16_out,
                                          const std::vector<float>* start) {
  const double groups = static_cast<double>((depth + 15) / 16);
  const double accumulation = groups * std::ldexp(1.0, -13) + depth * std::ldexp(1.0, -24);
  const double output_rounding = bf16_out ? std::ldexp(1.0, -9) : std::ldexp(1.0, -24);
  int64_t failures = 0;
  double worst_ratio = 0.0;
  std::string worst;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t d = 0; d < depth; ++d) {
        const double term = left[i * depth + d] * right[j * depth + d];
        sum += term;
        magnitude += std::fabs(term);
      }
      double expected = s * sum;
      if (start != nullptr) expected += (*start)[i * cols + j];
      const double bound = accumulation * s * magnitude * (1.0 + output_rounding) +
                           (output_rounding + std::ldexp(1.0, -22)) * std::fabs(expected) + 1e-30;
      const double error = std::fabs(static_cast<double>(got[i * cols + j]) - expected);
      const double ratio = std::isnan(error) ? INFINITY : error / bound;
      if (!(error <= bound)) ++failures;
      if (ratio > worst_ratio || worst.empty()) {
        worst_ratio = ratio;
        worst = absl::StrCat("[", i, ", ", j, "]: got ", got[i * cols + j], ", expected ", expected,
                             ", bound ", bound);
      }
    }
  }
  std::printf("  worst error / bound %.4f at %s\n", worst_ratio, worst.c_str());
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << rows * cols << " elements out of bound; worst " << worst;
}

std::vector<float> Bf16ToFloat(const std::vector<uint16_t>& bits) {
  std::vector<float> values(bits.size());
  cpu::CastBfloat16ToFloat32(bits.data(), static_cast<int64_t>(bits.size()), values.data());
  return values;
}

// The three products of a layer, from operands cast as the step casts them: forward reads x
// and W, the input gradient dY and Wᵀ, the weight gradient dYᵀ and Xᵀ. The references read the
// row-major bytes only, so a wrong transpose fails too.
TEST_P(CudaFp8GemmTest, LayerProductsMatchTheHost) {
  const GemmCase c = GetParam();
  const int64_t t = c.tokens, n = c.out_features, k = c.in_features;
  const Quantized x = Quantize(RandomValues(random_, t * k), t, k, Fp8Format::kE4M3);
  const Quantized w = Quantize(RandomValues(random_, n * k, 0.05f), n, k, Fp8Format::kE4M3);
  const Quantized dy = Quantize(RandomValues(random_, t * n, 1e-3f), t, n, c.grad_format);
  std::unique_ptr<cuda::Fp8Gemm> gemm = NewGemm();
  ASSERT_NE(gemm, nullptr);

  // Forward: out[t, n] = Σ_k x[t, k]·w[n, k].
  auto* out = Poisoned<__nv_bfloat16>(t * n * 2);
  ASSERT_TRUE(gemm->Forward(x.Plain(), w.Plain(), t, n, k, out, stream_).ok());
  EXPECT_TRUE(MatchesProduct(Bf16ToFloat(DownloadRaw(reinterpret_cast<uint16_t*>(out), t * n)),
                             x.values, w.values, t, n, k, x.descale * w.descale, true, nullptr));

  // Input gradient: dx[t, k] = Σ_n dy[t, n]·w[n, k]; the reference reads w column by column.
  std::vector<double> w_columns(static_cast<size_t>(k * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) w_columns[j * n + i] = w.values[i * k + j];
  }
  auto* dx = Poisoned<__nv_bfloat16>(t * k * 2);
  ASSERT_TRUE(gemm->InputGradient(dy.Plain(), w.Transposed(), t, n, k, dx, stream_).ok());
  EXPECT_TRUE(MatchesProduct(Bf16ToFloat(DownloadRaw(reinterpret_cast<uint16_t*>(dx), t * k)),
                             dy.values, w_columns, t, k, n, dy.descale * w.descale, true, nullptr));

  // Weight gradient: dw[n, k] (+)= Σ_t dy[t, n]·x[t, k], accumulated onto values of the
  // product's size, then overwriting a poisoned buffer.
  std::vector<double> dy_columns(static_cast<size_t>(n * t)), x_columns(static_cast<size_t>(k * t));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t j = 0; j < n; ++j) dy_columns[j * t + r] = dy.values[r * n + j];
    for (int64_t j = 0; j < k; ++j) x_columns[j * t + r] = x.values[r * k + j];
  }
  const std::vector<float> start = RandomValues(random_, n * k, 0.05f);
  float* dw = UploadRaw(start);
  ASSERT_TRUE(gemm->WeightGradient(dy.Transposed(), x.Transposed(), t, n, k, dw, stream_).ok());
  EXPECT_TRUE(MatchesProduct(DownloadRaw(dw, n * k), dy_columns, x_columns, n, k, t,
                             dy.descale * x.descale, false, &start));
  float* fresh = Poisoned<float>(n * k * 4);
  ASSERT_TRUE(gemm->WeightGradient(dy.Transposed(), x.Transposed(), t, n, k, fresh, stream_,
                                   /*accumulate=*/false)
                  .ok());
  EXPECT_TRUE(MatchesProduct(DownloadRaw(fresh, n * k), dy_columns, x_columns, n, k, t,
                             dy.descale * x.descale, false, nullptr));

  // The same shapes again: no new plans.
  const int64_t plans = gemm->cached_plans();
  ASSERT_TRUE(gemm->Forward(x.Plain(), w.Plain(), t, n, k, out, stream_).ok());
  EXPECT_EQ(gemm->cached_plans(), plans);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaFp8GemmTest,
                         ::testing::Values(GemmCase{256, 384, 512, Fp8Format::kE5M2},
                                           GemmCase{256, 384, 512, Fp8Format::kE4M3},
                                           // multiples of 16, not of any tile
                                           GemmCase{144, 208, 336, Fp8Format::kE5M2}));

TEST_F(CudaFp8Test, UnsupportedProductsAreRefusedWithAClearStatus) {
  const cuda::Fp8GemmConfig config;
  absl::StatusOr<std::unique_ptr<cuda::Fp8Gemm>> gemm =
      cuda::Fp8Gemm::Create(Poisoned<uint8_t>(config.workspace_bytes), config);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  uint8_t* a = Poisoned<uint8_t>(64 * 64);
  uint8_t* b = Poisoned<uint8_t>(64 * 64);
  float* descale = UploadRaw(std::vector<float>{1.0f, 1.0f, 1.0f});
  auto* out = Poisoned<__nv_bfloat16>(64 * 64 * 4);
  const cuda::Fp8Operand e4m3_a{a, Fp8Format::kE4M3, descale}, e4m3_b{b, Fp8Format::kE4M3, descale};
  const cuda::Fp8Operand e5m2_a{a, Fp8Format::kE5M2, descale}, e5m2_b{b, Fp8Format::kE5M2, descale};

  // K (the reduction dimension) not a multiple of 16.
  absl::Status status = (*gemm)->Forward(e4m3_a, e4m3_b, 32, 48, 40, out, stream_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("multiple of 16"), std::string::npos) << status;
  // bf16 output rows of 36 elements: not 16 bytes.
  status = (*gemm)->Forward(e4m3_a, e4m3_b, 32, 36, 64, out, stream_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // e5m2 × e5m2.
  status = (*gemm)->InputGradient(e5m2_a, e5m2_b, 32, 32, 32, out, stream_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("e5m2"), std::string::npos) << status;
  // A misaligned operand.
  const cuda::Fp8Operand shifted{a + 8, Fp8Format::kE4M3, descale};
  status = (*gemm)->Forward(shifted, e4m3_b, 32, 32, 32, out, stream_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // A descale 8 bytes past a 16-byte boundary, which cuBLASLt's FP8 algorithms do not run.
  const cuda::Fp8Operand unaligned_descale{a, Fp8Format::kE4M3, descale + 2};
  status = (*gemm)->Forward(unaligned_descale, e4m3_b, 32, 32, 32, out, stream_);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("descale"), std::string::npos) << status;
  EXPECT_EQ((*gemm)->cached_plans(), 0);  // all refused before cuBLASLt was asked
  // Nothing was written.
  for (uint16_t bits : DownloadRaw(reinterpret_cast<uint16_t*>(out), 64 * 64)) {
    ASSERT_EQ(bits, 0xffff);
  }
}

}  // namespace
}  // namespace fsdpd::testing
