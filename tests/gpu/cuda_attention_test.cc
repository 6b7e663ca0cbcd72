// Flash-style attention forward and backward against the CPU's exact softmax attention.
#include <algorithm>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  bool causal;
};

// The tensor-core kernels round the probabilities P and their gradients dS to bf16 before the
// second product of each pair, as FlashAttention does. An element of dv = Σ_i P_ij·dO_i then
// carries an error of about 2^-9·|dO|·sqrt(Σ_i P_ij²), and under the causal mask the first keys
// collect weight from every query (column sums of P of several units), so a few elements in
// 10^5 drift to ~3% of the gradient's root mean square. The fp32 CUDA-core kernels keep P in
// fp32 and stay within 1%.
double GradientAbsoluteTolerance(int64_t head_dim, bool tensor_cores) {
  const bool tensor_core_path =
      tensor_cores && (head_dim == 32 || head_dim == 64 || head_dim == 128);
  return tensor_core_path ? 0.04 : 0.01;
}

class CudaAttentionTest : public CudaTest, public ::testing::WithParamInterface<AttentionCase> {
 protected:
  // The Ops path (whichever implementation kAuto picks) against the CPU for one case, every
  // output poisoned first. `gradient_tolerance` is dqkv's absolute bound as a fraction of its
  // root mean square.
  void ExpectOpsMatchTheCpu(const AttentionCase& c, double gradient_tolerance);
};

// Everything runs in fp32 from the same bf16 inputs; only the summation order and the online
// softmax's rescaling differ from the CPU, so before the final bf16 rounding the outputs agree
// to ~1e-5. The bf16 outputs get one rounding (2^-9 relative, 2^-8 allowed) and an absolute
// allowance of 1% of the output's root mean square for values that cancel to near zero.
TEST_P(CudaAttentionTest, ForwardAndBackwardMatchTheCpu) {
  ExpectOpsMatchTheCpu(GetParam(), GradientAbsoluteTolerance(GetParam().head_dim, true));
}

void CudaAttentionTest::ExpectOpsMatchTheCpu(const AttentionCase& c, double gradient_tolerance) {
  const int64_t dim = c.heads * c.head_dim;
  const int64_t b = c.batch, s = c.seq;
  std::vector<float> qkv = RoundedToBf16(RandomValues(random_, b * s * 3 * dim));
  std::vector<float> dout = RoundedToBf16(RandomValues(random_, b * s * dim));

  Tensor device_qkv = Upload(qkv, DType::kBF16, {b, s, 3 * dim});
  Tensor out = Poisoned(DType::kBF16, {b, s, dim});
  Tensor lse = Poisoned(DType::kF32, {b, c.heads, s});
  ASSERT_TRUE(
      gpu().AttentionForward(device_qkv, c.heads, c.heads, c.causal, out, lse, gpu_stream()).ok());
  std::vector<float> expected_out(b * s * dim), expected_lse(b * c.heads * s);
  ASSERT_TRUE(cpu_ops()
                  .AttentionForward(Host(qkv, {b, s, 3 * dim}), c.heads, c.heads, c.causal,
                                    Host(expected_out, {b, s, dim}),
                                    Host(expected_lse, {b, c.heads, s}), cpu_stream())
                  .ok());
  const std::vector<float> gpu_out = Download(out);
  std::vector<float> gpu_lse = Download(lse);
  // Both sides read the same bf16 q, k and v. lse is fp32 from fp32-accumulated scores: only the
  // summation order differs (about 1e-6 relative per score), so 1e-4 absolute is ample. The
  // output passes through two bf16 roundings the CPU does not make (the probabilities before
  // P·V, and the output itself; 2^-9 relative each): 2^-7 relative is four of them, and 1 % of
  // the output's RMS covers the elements near zero, where the weighted sum cancels and a
  // relative bound means nothing. A wrong mask, scale or softmax misses by O(1).
  EXPECT_TRUE(AllClose(gpu_lse, expected_lse, 1e-4, 1e-5));
  EXPECT_TRUE(AllClose(gpu_out, expected_out, 0.01 * RootMeanSquare(expected_out), 1.0 / 128));

  // Backward from the GPU's own saved output and lse, given to both sides, so that the
  // comparison measures the backward kernels alone.
  Tensor device_dout = Upload(dout, DType::kBF16, {b, s, dim});
  Tensor dqkv = Poisoned(DType::kBF16, {b, s, 3 * dim});
  ASSERT_TRUE(gpu()
                  .AttentionBackward(device_dout, device_qkv, out, lse, c.heads, c.heads, c.causal,
                                     dqkv, gpu_stream())
                  .ok());
  std::vector<float> host_out = gpu_out;
  std::vector<float> expected_dqkv(b * s * 3 * dim);
  ASSERT_TRUE(cpu_ops()
                  .AttentionBackward(Host(dout, {b, s, dim}), Host(qkv, {b, s, 3 * dim}),
                                     Host(host_out, {b, s, dim}), Host(gpu_lse, {b, c.heads, s}),
                                     c.heads, c.heads, c.causal,
                                     Host(expected_dqkv, {b, s, 3 * dim}), cpu_stream())
                  .ok());
  EXPECT_TRUE(AllClose(Download(dqkv), expected_dqkv,
                       gradient_tolerance * RootMeanSquare(expected_dqkv), 1.0 / 64))
      << "causal " << c.causal;
}

// head_dim 256 (dim 4096 over 16 heads) runs only through cuDNN's fused attention, which rounds
// the probabilities to bf16 as the own tensor-core kernels do: their gradient bound applies.
class CudaAttentionWideHeadTest : public CudaAttentionTest {};

TEST_F(CudaAttentionWideHeadTest, HeadDim256RunsThroughCudnnAndMatchesTheCpu) {
  if (!cuda::cudnn_attention::Compiled()) GTEST_SKIP() << "this build has no cuDNN";
  for (bool causal : {false, true}) {
    const AttentionCase c{2, 130, 2, 256, causal};
    absl::StatusOr<cuda::AttentionKernel> resolved =
        cuda::ResolveAttentionKernel({c.batch, c.seq, c.heads, c.heads * c.head_dim}, causal);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    ASSERT_EQ(*resolved, cuda::AttentionKernel::kCudnn);
    ExpectOpsMatchTheCpu(c, GradientAbsoluteTolerance(128, true));
  }
}

// The own kernels keep their head_dim limit of 128; asked for 256 they refuse with an error that
// names the limit and cuDNN, a permanent failure for the job (FailedPrecondition).
TEST(CudaAttentionArguments, OwnKernelsRefuseHeadDim256NamingTheirLimit) {
  for (cuda::AttentionKernel kernel :
       {cuda::AttentionKernel::kTensorCore, cuda::AttentionKernel::kCudaCore}) {
    cuda::AttentionDims dims{1, 64, 2, 2 * 256};
    dims.kernel = kernel;
    const absl::Status status = cuda::ResolveAttentionKernel(dims, false).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("head_dim 256 needs cuDNN"), std::string::npos) << status;
    EXPECT_NE(status.message().find("up to 128"), std::string::npos) << status;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    ::testing::Values(AttentionCase{2, 16, 4, 8, false},   // the tiny golden model
                      AttentionCase{2, 70, 3, 32, false},  // sequence not a tile multiple
                      AttentionCase{2, 70, 3, 32, true}, AttentionCase{1, 130, 2, 64, true},
                      AttentionCase{1, 200, 2, 128, false},  // the seed's head_dim
                      AttentionCase{1, 129, 2, 128, true},
                      AttentionCase{1, 40, 2, 48, false}));  // head_dim below a template size

// The launchers directly, once per implementation (cuDNN's fused attention, the own tensor-core
// and fp32 CUDA-core kernels), for the seed's head_dim: each must match the CPU (the Ops path
// above takes whichever kAuto picks). cuDNN, like the own tensor-core kernels, rounds the
// probabilities to bf16 before the second product, so it gets the same tolerances.
class CudaAttentionKernelPathTest : public CudaTest,
                                    public ::testing::WithParamInterface<cuda::AttentionKernel> {};

TEST_P(CudaAttentionKernelPathTest, SeedHeadDimMatchesTheCpu) {
  const cuda::AttentionKernel kernel = GetParam();
  if (kernel == cuda::AttentionKernel::kCudnn && !cuda::cudnn_attention::Compiled()) {
    GTEST_SKIP() << "this build has no cuDNN";
  }
  const bool tensor_cores = kernel != cuda::AttentionKernel::kCudaCore;
  for (bool causal : {false, true}) {
    const int64_t b = 2, s = 150, heads = 2, head_dim = 128, dim = heads * head_dim;
    std::vector<float> qkv = RoundedToBf16(RandomValues(random_, b * s * 3 * dim));
    std::vector<float> dout = RoundedToBf16(RandomValues(random_, b * s * dim));
    Tensor device_qkv = Upload(qkv, DType::kBF16, {b, s, 3 * dim});
    Tensor device_dout = Upload(dout, DType::kBF16, {b, s, dim});
    Tensor out = Poisoned(DType::kBF16, {b, s, dim});
    Tensor lse = Poisoned(DType::kF32, {b, heads, s});
    Tensor dqkv = Poisoned(DType::kBF16, {b, s, 3 * dim});
    cuda::AttentionDims dims{b, s, heads, dim};
    dims.kernel = kernel;
    absl::StatusOr<cuda::AttentionKernel> resolved = cuda::ResolveAttentionKernel(dims, causal);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    ASSERT_EQ(*resolved, kernel);
    absl::StatusOr<cuda::AttentionWorkspace> workspace =
        cuda::AttentionWorkspaceBytes(dims, causal);
    ASSERT_TRUE(workspace.ok()) << workspace.status();
    const int64_t scratch_bytes =
        std::max<int64_t>({workspace->forward_bytes, workspace->backward_bytes, 4});
    Tensor scratch = NewDevice(DType::kF32, {(scratch_bytes + 3) / 4});
    absl::StatusOr<cudaStream_t> stream = CudaStreamOf(gpu_stream());
    ASSERT_TRUE(stream.ok());
    using bf16 = __nv_bfloat16;
    absl::Status forward =
        cuda::AttentionForward(device_qkv.as<bf16>(), dims, causal, out.as<bf16>(), lse.as<float>(),
                               scratch.data, scratch_bytes, *stream);
    ASSERT_TRUE(forward.ok()) << forward;
    absl::Status backward = cuda::AttentionBackward(
        device_dout.as<bf16>(), device_qkv.as<bf16>(), out.as<bf16>(), lse.as<float>(), dims,
        causal, dqkv.as<bf16>(), scratch.data, scratch_bytes, *stream);
    ASSERT_TRUE(backward.ok()) << backward;
    std::vector<float> expected_out(b * s * dim), expected_lse(b * heads * s);
    ASSERT_TRUE(cpu_ops()
                    .AttentionForward(Host(qkv, {b, s, 3 * dim}), heads, heads, causal,
                                      Host(expected_out, {b, s, dim}),
                                      Host(expected_lse, {b, heads, s}), cpu_stream())
                    .ok());
    std::vector<float> gpu_out = Download(out);
    std::vector<float> gpu_lse = Download(lse);
    // The tensor-core kernel computes scores with bf16 MMAs accumulated in fp32 and the softmax
    // with the hardware exp2 (ex2.approx, 2^-22 relative): over this longer sequence lse drifts
    // by up to about 1e-4 from the CPU's; 1e-3 absolute keeps a tenfold margin and is still far
    // below the O(1) error of a wrong scale or mask. The output bound is the one above.
    EXPECT_TRUE(AllClose(gpu_lse, expected_lse, 1e-3, 1e-4)) << "causal " << causal;
    EXPECT_TRUE(AllClose(gpu_out, expected_out, 0.01 * RootMeanSquare(expected_out), 1.0 / 128))
        << "causal " << causal;
    std::vector<float> expected_dqkv(b * s * 3 * dim);
    ASSERT_TRUE(cpu_ops()
                    .AttentionBackward(Host(dout, {b, s, dim}), Host(qkv, {b, s, 3 * dim}),
                                       Host(gpu_out, {b, s, dim}), Host(gpu_lse, {b, heads, s}),
                                       heads, heads, causal, Host(expected_dqkv, {b, s, 3 * dim}),
                                       cpu_stream())
                    .ok());
    EXPECT_TRUE(
        AllClose(Download(dqkv), expected_dqkv,
                 GradientAbsoluteTolerance(head_dim, tensor_cores) * RootMeanSquare(expected_dqkv),
                 1.0 / 64))
        << "causal " << causal;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaAttentionKernelPathTest,
                         ::testing::Values(cuda::AttentionKernel::kCudnn,
                                           cuda::AttentionKernel::kTensorCore,
                                           cuda::AttentionKernel::kCudaCore),
                         [](const ::testing::TestParamInfo<cuda::AttentionKernel>& info) {
                           switch (info.param) {
                             case cuda::AttentionKernel::kCudnn:
                               return std::string("Cudnn");
                             case cuda::AttentionKernel::kTensorCore:
                               return std::string("TensorCores");
                             default:
                               return std::string("CudaCores");
                           }
                         });

TEST(CudaAttentionArguments, HeadDimAboveTheLimitIsRejected) {
  if (CudaBackend::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  // 512: above every implementation's limit (cuDNN's 256 included).
  auto qkv = (*backend)->Allocate(2 * 4 * 3 * 512);
  auto out = (*backend)->Allocate(2 * 4 * 512);
  auto lse = (*backend)->Allocate(4 * 4);
  ASSERT_TRUE(qkv.ok() && out.ok() && lse.ok());
  const absl::Status status = (*backend)->ops().AttentionForward(
      (*qkv)->View(DType::kBF16, {1, 4, 3 * 512}), 1, 1, false,
      (*out)->View(DType::kBF16, {1, 4, 512}), (*lse)->View(DType::kF32, {1, 1, 4}),
      (*backend)->compute_stream());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("head_dim 512 exceeds 256"), std::string::npos) << status;
}

}  // namespace
}  // namespace fsdpd::testing
