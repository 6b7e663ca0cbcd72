// The CUDA backend's Llama ops against the CPU reference on the same bf16 inputs: rotary
// positions (forward and inverse, in place on packed qkv rows) and SwiGLU (forward, backward with
// and without the recompute of out, in place). Each runs the 16-byte vector kernels and the
// one-element kernels they fall back to.
#include <cmath>
#include <ostream>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

// One bf16 rounding of a result is off by at most 2^-9 of it; the bounds allow 2^-8 (twice that,
// for the fp32 differences under the rounding) plus an absolute term for results that cancel to
// near zero, as cuda_pointwise_test.cc's do.
constexpr double kBf16Relative = 1.0 / 256;

class CudaLlamaOpsTest : public CudaTest {
 protected:
  // A device bf16 tensor holding `values`, starting `offset` elements into its buffer: an offset
  // of 1 leaves it 2-byte aligned only, which sends the ops to their one-element kernels.
  Tensor UploadAt(const std::vector<float>& values, std::vector<int64_t> shape, int64_t offset) {
    const int64_t count = static_cast<int64_t>(values.size());
    Tensor buffer = NewDevice(DType::kBF16, {count + offset});
    Tensor tensor{static_cast<char*>(buffer.data) + 2 * offset, DType::kBF16, std::move(shape)};
    std::vector<uint16_t> bits(values.size());
    cpu::CastFloat32ToBfloat16(values.data(), count, bits.data());
    EXPECT_TRUE(cuda_->CopyToDevice(bits.data(), tensor, gpu_stream()).ok());
    return tensor;
  }
};

struct RotaryCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
  int64_t offset;  // elements; 1 makes qkv unaligned
};

// What GoogleTest prints for a case (and CTest's test names carry), instead of its bytes.
void PrintTo(const RotaryCase& c, std::ostream* os) {
  *os << "batch " << c.batch << " seq " << c.seq << " heads " << c.heads << " kv_heads "
      << c.kv_heads << " head_dim " << c.head_dim << " offset " << c.offset;
}

std::string RotaryName(const ::testing::TestParamInfo<RotaryCase>& info) {
  const RotaryCase& c = info.param;
  return absl::StrCat("B", c.batch, "S", c.seq, "H", c.heads, "KV", c.kv_heads, "HD", c.head_dim,
                      c.offset != 0 ? "Unaligned" : "");
}

class CudaRotaryTest : public CudaLlamaOpsTest, public ::testing::WithParamInterface<RotaryCase> {};

// Both sides rotate the same bf16 values by the same fp32 angles (the inverse frequencies are the
// CPU's own expression, evaluated on the host); their cosines and sines differ by the device's
// sincosf error (2 ulp of fp32) and the rotation's products and sums are rounded alike, so the
// fp32 results agree to about 1e-6 of the pair's magnitude and the GPU's single bf16 rounding
// dominates: 2^-8 relative, 1e-5 absolute for rotated values that cancel to near zero. A wrong
// angle, pairing or sign misses by O(1), even at the last positions of the 2048-long case,
// whose angles reach 2047 radians. v must come back bit for bit untouched.
TEST_P(CudaRotaryTest, ForwardAndInverseMatchTheCpuAndLeaveValuesAlone) {
  const RotaryCase c = GetParam();
  const double theta = 10000.0;
  const int64_t width = (c.heads + 2 * c.kv_heads) * c.head_dim;
  const int64_t rows = c.batch * c.seq;
  const int64_t rotated = (c.heads + c.kv_heads) * c.head_dim;  // q and k, from each row's start
  const std::vector<int64_t> shape{c.batch, c.seq, width};
  const std::vector<float> qkv = RoundedToBf16(RandomValues(random_, rows * width, 2.0f));
  Tensor device = UploadAt(qkv, shape, c.offset);

  ASSERT_TRUE(gpu().Rotary(device, c.heads, c.kv_heads, theta, false, gpu_stream()).ok());
  const std::vector<float> rotated_gpu = Download(device);
  std::vector<float> expected = qkv;
  ASSERT_TRUE(cpu_ops()
                  .Rotary(Host(expected, shape), c.heads, c.kv_heads, theta, false, cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(rotated_gpu, expected, 1e-5, kBf16Relative));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = rotated; i < width; ++i) {
      ASSERT_EQ(rotated_gpu[r * width + i], qkv[r * width + i]) << "v changed at row " << r;
    }
  }

  // The inverse (the backward on dqkv) from the GPU's rotated values, on both sides.
  ASSERT_TRUE(gpu().Rotary(device, c.heads, c.kv_heads, theta, true, gpu_stream()).ok());
  std::vector<float> expected_inverse = rotated_gpu;
  ASSERT_TRUE(
      cpu_ops()
          .Rotary(Host(expected_inverse, shape), c.heads, c.kv_heads, theta, true, cpu_stream())
          .ok());
  const std::vector<float> inverse_gpu = Download(device);
  EXPECT_TRUE(AllClose(inverse_gpu, expected_inverse, 1e-5, kBf16Relative));
  // And it undoes the rotation up to the bf16 roundings between: the rotated pair's two values
  // (each at most |x_i| + |x_j|) and the result, 2^-9 of each, so 2^-7·(|x_i| + |x_j|) bounds it.
  const int64_t half = c.head_dim / 2;
  int failures = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < c.heads + c.kv_heads; ++h) {
      for (int64_t i = 0; i < c.head_dim; ++i) {
        const int64_t at = r * width + h * c.head_dim + i;
        const int64_t partner = i < half ? at + half : at - half;
        const double bound = (std::fabs(qkv[at]) + std::fabs(qkv[partner])) / 128.0 + 1e-6;
        if (!(std::fabs(inverse_gpu[at] - qkv[at]) <= bound) && ++failures <= 5) {
          ADD_FAILURE() << "row " << r << " head " << h << " value " << i << ": " << inverse_gpu[at]
                        << " after both rotations, " << qkv[at] << " before";
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaRotaryTest,
    ::testing::Values(RotaryCase{2, 37, 4, 2, 64, 0},  // vector kernel, GQA 2
                      RotaryCase{1, 2048, 16, 4, 128,
                                 0},                   // the Llama bench's heads, long positions
                      RotaryCase{3, 19, 6, 3, 48, 0},  // head_dim/2 = 24: vectors of 8
                      RotaryCase{2, 16, 4, 2, 8, 0},   // the golden model's head_dim: one at a time
                      RotaryCase{2, 9, 2, 1, 6, 0},    // head_dim/2 odd
                      RotaryCase{2, 33, 4, 1, 32, 0},  // MQA
                      RotaryCase{2, 21, 4, 4, 64, 1}),  // unaligned: the one-element kernel
    RotaryName);

TEST_F(CudaLlamaOpsTest, RotaryRefusesWhatItCannotRun) {
  // fp32 activations are the CPU engine's, not CUDA's.
  Tensor f32 = NewDevice(DType::kF32, {1, 2, 4 * 8});
  absl::Status status = gpu().Rotary(f32, 2, 1, 10000.0, false, gpu_stream());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("qkv"), std::string::npos) << status;
  // head_dim 512: above attention's limit, whose inverse frequencies the kernel carries.
  Tensor wide = NewDevice(DType::kBF16, {1, 2, 3 * 512});
  status = gpu().Rotary(wide, 1, 1, 10000.0, false, gpu_stream());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("head_dim 512 exceeds 256"), std::string::npos) << status;
}

struct SwigluCase {
  int64_t rows, ffn;
  int64_t offset;  // elements; 1 makes gate_up unaligned
};

void PrintTo(const SwigluCase& c, std::ostream* os) {
  *os << "rows " << c.rows << " ffn " << c.ffn << " offset " << c.offset;
}

std::string SwigluName(const ::testing::TestParamInfo<SwigluCase>& info) {
  return absl::StrCat("T", info.param.rows, "F", info.param.ffn,
                      info.param.offset != 0 ? "Unaligned" : "");
}

class CudaSwigluTest : public CudaLlamaOpsTest, public ::testing::WithParamInterface<SwigluCase> {};

// fp32 maths on the same bf16 inputs; the GPU's sigmoid is silu_math.cuh's (SFU exponential and
// reciprocal, about 2 ulp of fp32), far below the one bf16 rounding of each output: 2^-8
// relative. The absolute 1e-5 covers outputs near zero, where silu'(gate) = σ·(1 + gate·(1 − σ))
// cancels (gate ≈ −1.28): there σ's 2-ulp error moves the result by about 1e-6 at these scales.
TEST_P(CudaSwigluTest, ForwardAndBackwardMatchTheCpu) {
  const SwigluCase c = GetParam();
  const int64_t rows = c.rows, ffn = c.ffn;
  std::vector<float> gate_up = RoundedToBf16(RandomValues(random_, rows * 2 * ffn, 3.0f));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, rows * ffn));
  Tensor device_gate_up = UploadAt(gate_up, {rows, 2 * ffn}, c.offset);
  Tensor device_dout = Upload(dout, DType::kBF16, {rows, ffn});
  Tensor out = Poisoned(DType::kBF16, {rows, ffn});
  Tensor dgate_up = Poisoned(DType::kBF16, {rows, 2 * ffn});
  ASSERT_TRUE(gpu().SwigluForward(device_gate_up, out, gpu_stream()).ok());
  ASSERT_TRUE(
      gpu().SwigluBackward(device_dout, device_gate_up, dgate_up, Tensor{}, gpu_stream()).ok());

  std::vector<float> expected_out(rows * ffn), expected_dgate_up(rows * 2 * ffn);
  ASSERT_TRUE(cpu_ops()
                  .SwigluForward(Host(gate_up, {rows, 2 * ffn}), Host(expected_out, {rows, ffn}),
                                 cpu_stream())
                  .ok());
  ASSERT_TRUE(cpu_ops()
                  .SwigluBackward(Host(dout, {rows, ffn}), Host(gate_up, {rows, 2 * ffn}),
                                  Host(expected_dgate_up, {rows, 2 * ffn}), Tensor{}, cpu_stream())
                  .ok());
  const std::vector<float> forward = Download(out);
  const std::vector<float> separate = Download(dgate_up);
  EXPECT_TRUE(AllClose(forward, expected_out, 1e-5, kBf16Relative));
  EXPECT_TRUE(AllClose(separate, expected_dgate_up, 1e-5, kBf16Relative));

  // The FFN backward's form: dgate_up written over gate_up, out recomputed in the same pass. It
  // must give the separate kernels' bits (the trajectory does not depend on the form).
  Tensor in_place = UploadAt(gate_up, {rows, 2 * ffn}, c.offset);
  Tensor recomputed = Poisoned(DType::kBF16, {rows, ffn});
  ASSERT_TRUE(gpu().SwigluBackward(device_dout, in_place, in_place, recomputed, gpu_stream()).ok());
  EXPECT_EQ(Download(recomputed), forward);
  EXPECT_EQ(Download(in_place), separate);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSwigluTest,
                         ::testing::Values(SwigluCase{32, 512, 0},  // vector kernels
                                           SwigluCase{7, 5632, 0},  // the Llama bench's ffn
                                           SwigluCase{5, 48, 0},    // a row narrower than a warp
                                           SwigluCase{33, 515, 0},  // ffn not a multiple of 8
                                           SwigluCase{9, 64, 1}),   // unaligned
                         SwigluName);

}  // namespace
}  // namespace fsdpd::testing
