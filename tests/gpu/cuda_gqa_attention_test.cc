// Grouped-query attention (kv_heads < heads: k and v heads shared by heads / kv_heads query
// heads) against the CPU's exact softmax attention, through each implementation (cuDNN's fused
// SDPA, the own tensor-core and fp32 CUDA-core kernels), forward and backward, causal and not,
// for groups of 1, 2 and 4 and head_dim 32, 64 and 128; then once through the Ops path.
#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

using bf16 = __nv_bfloat16;

struct GqaCase {
  cuda::AttentionKernel kernel;
  int64_t group;  // heads / kv_heads
  int64_t head_dim;
};

std::string KernelName(cuda::AttentionKernel kernel) {
  switch (kernel) {
    case cuda::AttentionKernel::kCudnn:
      return "Cudnn";
    case cuda::AttentionKernel::kTensorCore:
      return "TensorCores";
    case cuda::AttentionKernel::kCudaCore:
      return "CudaCores";
    default:
      return "Auto";
  }
}

// What GoogleTest prints for a case (and CTest's test names carry), instead of its bytes.
void PrintTo(const GqaCase& c, std::ostream* os) {
  *os << KernelName(c.kernel) << " group " << c.group << " head_dim " << c.head_dim;
}

std::string CaseName(const ::testing::TestParamInfo<GqaCase>& info) {
  return absl::StrCat(KernelName(info.param.kernel), "Group", info.param.group, "HeadDim",
                      info.param.head_dim);
}

// The tolerances of cuda_attention_test.cc, whose comments derive them, as fractions of the
// gradient's root mean square: 0.04 where the probabilities and their gradients are rounded to
// bf16 before the second product (the tensor-core kernels and cuDNN), 0.01 where they stay fp32
// (the CUDA-core kernels). Grouping adds the group's query heads into each dk and dv: their
// values and their rounding errors both grow as √group, but the root mean square of all of dqkv
// (dq's part unchanged) grows only as √(3·group / (group + 2)), so the fraction is scaled by
// √group, which covers the difference with room (1.15× needed at group 2, 1.41× at 4). A kv head
// summed over the wrong query heads, or over too few, misses by a good part of dk's own size.
double GradientTolerance(cuda::AttentionKernel kernel, int64_t group) {
  const double base = kernel == cuda::AttentionKernel::kCudaCore ? 0.01 : 0.04;
  return base * std::sqrt(static_cast<double>(group));
}

class CudaGqaAttentionTest : public CudaTest, public ::testing::WithParamInterface<GqaCase> {
 protected:
  // Forward and backward through `dims.kernel` (forced, as FSDPD_ATTENTION_KERNEL would), each
  // output poisoned first, against the CPU on the same bf16 inputs.
  void ExpectMatchesTheCpu(cuda::AttentionDims dims, int64_t head_dim, bool causal,
                           double gradient_tolerance);
};

void CudaGqaAttentionTest::ExpectMatchesTheCpu(cuda::AttentionDims dims, int64_t head_dim,
                                               bool causal, double gradient_tolerance) {
  SCOPED_TRACE(absl::StrCat("heads ", dims.heads, ", kv_heads ", dims.kv_heads, ", head_dim ",
                            head_dim, causal ? ", causal" : ""));
  const int64_t b = dims.batch, s = dims.seq, heads = dims.heads, kv_heads = dims.kv_heads;
  const int64_t dim = heads * head_dim;
  const int64_t width = (heads + 2 * kv_heads) * head_dim;
  std::vector<float> qkv = RoundedToBf16(RandomValues(random_, b * s * width));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, b * s * dim));
  Tensor device_qkv = Upload(qkv, DType::kBF16, {b, s, width});
  Tensor device_dout = Upload(dout, DType::kBF16, {b, s, dim});
  Tensor out = Poisoned(DType::kBF16, {b, s, dim});
  Tensor lse = Poisoned(DType::kF32, {b, heads, s});
  Tensor dqkv = Poisoned(DType::kBF16, {b, s, width});

  absl::StatusOr<cuda::AttentionKernel> resolved = cuda::ResolveAttentionKernel(dims, causal);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ(*resolved, dims.kernel);
  absl::StatusOr<cuda::AttentionWorkspace> workspace = cuda::AttentionWorkspaceBytes(dims, causal);
  ASSERT_TRUE(workspace.ok()) << workspace.status();
  const int64_t scratch_bytes =
      std::max<int64_t>({workspace->forward_bytes, workspace->backward_bytes, 4});
  Tensor scratch = NewDevice(DType::kF32, {(scratch_bytes + 3) / 4});
  absl::StatusOr<cudaStream_t> stream = CudaStreamOf(gpu_stream());
  ASSERT_TRUE(stream.ok());
  absl::Status forward =
      cuda::AttentionForward(device_qkv.as<bf16>(), dims, causal, out.as<bf16>(), lse.as<float>(),
                             scratch.data, scratch_bytes, *stream);
  ASSERT_TRUE(forward.ok()) << forward;
  absl::Status backward = cuda::AttentionBackward(
      device_dout.as<bf16>(), device_qkv.as<bf16>(), out.as<bf16>(), lse.as<float>(), dims, causal,
      dqkv.as<bf16>(), scratch.data, scratch_bytes, *stream);
  ASSERT_TRUE(backward.ok()) << backward;

  std::vector<float> expected_out(b * s * dim), expected_lse(b * heads * s);
  ASSERT_TRUE(cpu_ops()
                  .AttentionForward(Host(qkv, {b, s, width}), heads, kv_heads, causal,
                                    Host(expected_out, {b, s, dim}),
                                    Host(expected_lse, {b, heads, s}), cpu_stream())
                  .ok());
  std::vector<float> gpu_out = Download(out);
  std::vector<float> gpu_lse = Download(lse);
  // cuda_attention_test.cc's bounds: lse within 1e-3 (bf16 MMAs accumulated in fp32 and the
  // hardware exp2 over sequences of this length), the output within four bf16 roundings (2^-7)
  // plus 1% of its root mean square where the weighted sum cancels.
  EXPECT_TRUE(AllClose(gpu_lse, expected_lse, 1e-3, 1e-4));
  EXPECT_TRUE(AllClose(gpu_out, expected_out, 0.01 * RootMeanSquare(expected_out), 1.0 / 128));

  // Backward from the GPU's own output and lse, given to both sides, so the comparison measures
  // the backward alone.
  std::vector<float> expected_dqkv(b * s * width);
  ASSERT_TRUE(cpu_ops()
                  .AttentionBackward(Host(dout, {b, s, dim}), Host(qkv, {b, s, width}),
                                     Host(gpu_out, {b, s, dim}), Host(gpu_lse, {b, heads, s}),
                                     heads, kv_heads, causal, Host(expected_dqkv, {b, s, width}),
                                     cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(dqkv), expected_dqkv,
                       gradient_tolerance * RootMeanSquare(expected_dqkv), 1.0 / 64));
}

// 4 query heads over 4, 2 or 1 kv heads; 130 positions cross the kernels' 32-, 64- and 128-row
// tiles with a ragged end.
TEST_P(CudaGqaAttentionTest, ForwardAndBackwardMatchTheCpu) {
  const GqaCase c = GetParam();
  if (c.kernel == cuda::AttentionKernel::kCudnn && !cuda::cudnn_attention::Compiled()) {
    GTEST_SKIP() << "this build has no cuDNN";
  }
  const int64_t heads = 4;
  for (bool causal : {false, true}) {
    cuda::AttentionDims dims{2, 130, heads, heads * c.head_dim};
    dims.kernel = c.kernel;
    dims.kv_heads = heads / c.group;
    ExpectMatchesTheCpu(dims, c.head_dim, causal, GradientTolerance(c.kernel, c.group));
  }
}

// Every implementation × group 1, 2, 4 × head_dim 32, 64, 128.
std::vector<GqaCase> AllCases() {
  std::vector<GqaCase> cases;
  for (cuda::AttentionKernel kernel :
       {cuda::AttentionKernel::kCudnn, cuda::AttentionKernel::kTensorCore,
        cuda::AttentionKernel::kCudaCore}) {
    for (int64_t group : {1, 2, 4}) {
      for (int64_t head_dim : {32, 64, 128}) cases.push_back(GqaCase{kernel, group, head_dim});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaGqaAttentionTest, ::testing::ValuesIn(AllCases()), CaseName);

// head_dim 48 runs the CUDA-core kernels through their 64-wide template, which must read and
// write only the head's 48 columns: with grouping, the next columns are another head's.
TEST_F(CudaGqaAttentionTest, CudaCoresAtAHeadDimBelowTheirTemplate) {
  cuda::AttentionDims dims{2, 70, 6, 6 * 48};
  dims.kernel = cuda::AttentionKernel::kCudaCore;
  dims.kv_heads = 2;
  for (bool causal : {false, true}) {
    ExpectMatchesTheCpu(dims, 48, causal, GradientTolerance(dims.kernel, 3));
  }
}

// The Ops path (CheckedOps, then CudaOps picking the implementation as a job does) with the
// Llama bench's grouping (4 query heads a kv head), and its dtype check.
TEST_F(CudaGqaAttentionTest, OpsPathMatchesTheCpu) {
  const int64_t b = 2, s = 70, heads = 8, kv_heads = 2, head_dim = 64;
  const int64_t dim = heads * head_dim, width = (heads + 2 * kv_heads) * head_dim;
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal);
    std::vector<float> qkv = RoundedToBf16(RandomValues(random_, b * s * width));
    std::vector<float> dout = RoundedToBf16(RandomValues(random_, b * s * dim));
    Tensor device_qkv = Upload(qkv, DType::kBF16, {b, s, width});
    Tensor out = Poisoned(DType::kBF16, {b, s, dim});
    Tensor lse = Poisoned(DType::kF32, {b, heads, s});
    Tensor dqkv = Poisoned(DType::kBF16, {b, s, width});
    absl::Status status =
        gpu().AttentionForward(device_qkv, heads, kv_heads, causal, out, lse, gpu_stream());
    ASSERT_TRUE(status.ok()) << status;
    status = gpu().AttentionBackward(Upload(dout, DType::kBF16, {b, s, dim}), device_qkv, out, lse,
                                     heads, kv_heads, causal, dqkv, gpu_stream());
    ASSERT_TRUE(status.ok()) << status;
    std::vector<float> expected_out(b * s * dim), expected_lse(b * heads * s);
    ASSERT_TRUE(cpu_ops()
                    .AttentionForward(Host(qkv, {b, s, width}), heads, kv_heads, causal,
                                      Host(expected_out, {b, s, dim}),
                                      Host(expected_lse, {b, heads, s}), cpu_stream())
                    .ok());
    std::vector<float> gpu_out = Download(out), gpu_lse = Download(lse);
    EXPECT_TRUE(AllClose(gpu_lse, expected_lse, 1e-3, 1e-4));
    EXPECT_TRUE(AllClose(gpu_out, expected_out, 0.01 * RootMeanSquare(expected_out), 1.0 / 128));
    std::vector<float> expected_dqkv(b * s * width);
    ASSERT_TRUE(cpu_ops()
                    .AttentionBackward(Host(dout, {b, s, dim}), Host(qkv, {b, s, width}),
                                       Host(gpu_out, {b, s, dim}), Host(gpu_lse, {b, heads, s}),
                                       heads, kv_heads, causal, Host(expected_dqkv, {b, s, width}),
                                       cpu_stream())
                    .ok());
    // Whichever implementation kAuto picked, the looser (bf16 probabilities) bound.
    EXPECT_TRUE(AllClose(Download(dqkv), expected_dqkv,
                         GradientTolerance(cuda::AttentionKernel::kTensorCore, heads / kv_heads) *
                             RootMeanSquare(expected_dqkv),
                         1.0 / 64));
  }
  Tensor f32 = NewDevice(DType::kF32, {b, s, width});
  Tensor out = NewDevice(DType::kBF16, {b, s, dim});
  Tensor lse = NewDevice(DType::kF32, {b, heads, s});
  const absl::Status status =
      gpu().AttentionForward(f32, heads, kv_heads, false, out, lse, gpu_stream());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("qkv"), std::string::npos) << status;
}

// The own kernels' dk and dv sum a group without atomics: the same inputs give the same bits.
TEST_F(CudaGqaAttentionTest, OwnBackwardIsDeterministicUnderGrouping) {
  const int64_t b = 1, s = 200, heads = 8, kv_heads = 2, head_dim = 64;
  const int64_t dim = heads * head_dim, width = (heads + 2 * kv_heads) * head_dim;
  Tensor qkv = Upload(RandomValues(random_, b * s * width), DType::kBF16, {b, s, width});
  Tensor dout = Upload(RandomValues(random_, b * s * dim), DType::kBF16, {b, s, dim});
  for (cuda::AttentionKernel kernel :
       {cuda::AttentionKernel::kTensorCore, cuda::AttentionKernel::kCudaCore}) {
    SCOPED_TRACE(KernelName(kernel));
    cuda::AttentionDims dims{b, s, heads, dim};
    dims.kernel = kernel;
    dims.kv_heads = kv_heads;
    absl::StatusOr<cuda::AttentionWorkspace> workspace = cuda::AttentionWorkspaceBytes(dims, true);
    ASSERT_TRUE(workspace.ok()) << workspace.status();
    const int64_t bytes =
        std::max<int64_t>({workspace->forward_bytes, workspace->backward_bytes, 4});
    Tensor scratch = NewDevice(DType::kF32, {(bytes + 3) / 4});
    Tensor out = NewDevice(DType::kBF16, {b, s, dim});
    Tensor lse = NewDevice(DType::kF32, {b, heads, s});
    absl::StatusOr<cudaStream_t> stream = CudaStreamOf(gpu_stream());
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE(cuda::AttentionForward(qkv.as<bf16>(), dims, true, out.as<bf16>(), lse.as<float>(),
                                       scratch.data, bytes, *stream)
                    .ok());
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
      Tensor dqkv = Poisoned(DType::kBF16, {b, s, width});
      ASSERT_TRUE(cuda::AttentionBackward(dout.as<bf16>(), qkv.as<bf16>(), out.as<bf16>(),
                                          lse.as<float>(), dims, true, dqkv.as<bf16>(),
                                          scratch.data, bytes, *stream)
                      .ok());
      runs.push_back(Download(dqkv));
    }
    EXPECT_EQ(runs[0], runs[1]);
  }
}

// kv_heads must divide heads; the launchers say so rather than read past a row.
TEST(CudaGqaAttentionArguments, KvHeadsNotDividingHeadsIsRefused) {
  cuda::AttentionDims dims{1, 16, 6, 6 * 32};
  dims.kv_heads = 4;
  const absl::Status status = cuda::ResolveAttentionKernel(dims, false).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("kv_heads (4)"), std::string::npos) << status;
}

}  // namespace
}  // namespace fsdpd::testing
