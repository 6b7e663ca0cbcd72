// The optimizer on a few SMs (CudaBackendConfig::optimizer_sms, FSDPD_OPTIMIZER_SMS): AdamW's
// kernels and its sum's first pass launch at most grid_limit blocks (each launch's grid is read
// through CUPTI's callbacks), give the very bits of the uncapped ones, and the backend refuses a
// count the device cannot spare.
#include <cupti.h>  // with the runtime API calls' parameter structs

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/split_master.h"
#include "tests/gpu/cuda_test_support.h"

namespace fsdpd::testing {
namespace {

using CudaOptimizerSmsTest = CudaTest;

// 1,000,003 elements: 250,000 vectors and a tail of three; 245 sum slices of 1,024 vectors. Seven
// blocks stride over all of them; a cap above the work's blocks changes nothing.
constexpr int64_t kCount = 1000003;

cudaStream_t RawStream(Stream& stream) { return *CudaStreamOf(stream); }

// The grid (x) of every kernel launched through the CUDA runtime while it lives, from CUPTI's
// runtime API callbacks. One per process: CUPTI takes one subscriber.
class LaunchedGrids {
 public:
  LaunchedGrids() {
    ok_ = cuptiSubscribe(&subscriber_, &LaunchedGrids::OnCallback, this) == CUPTI_SUCCESS;
    for (const CUpti_CallbackId id : {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
                                      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060}) {
      ok_ = ok_ &&
            cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API, id) == CUPTI_SUCCESS;
    }
  }
  ~LaunchedGrids() {
    if (subscriber_ != nullptr) cuptiUnsubscribe(subscriber_);
  }
  LaunchedGrids(const LaunchedGrids&) = delete;
  LaunchedGrids& operator=(const LaunchedGrids&) = delete;

  bool ok() const { return ok_; }
  // The grids launched since the last call, in order, each with its kernel's name.
  std::vector<std::pair<std::string, unsigned>> Take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(launches_, {});
  }

 private:
  static void CUPTIAPI OnCallback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                  const void* data) {
    const auto* info = static_cast<const CUpti_CallbackData*>(data);
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || info->callbackSite != CUPTI_API_ENTER) return;
    unsigned grid = 0;
    if (id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
      grid = static_cast<const cudaLaunchKernel_v7000_params*>(info->functionParams)->gridDim.x;
    } else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000) {
      grid =
          static_cast<const cudaLaunchKernel_ptsz_v7000_params*>(info->functionParams)->gridDim.x;
    } else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060) {
      grid = static_cast<const cudaLaunchKernelExC_v11060_params*>(info->functionParams)
                 ->config->gridDim.x;
    } else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060) {
      grid = static_cast<const cudaLaunchKernelExC_ptsz_v11060_params*>(info->functionParams)
                 ->config->gridDim.x;
    } else {
      return;
    }
    auto* recorder = static_cast<LaunchedGrids*>(self);
    std::lock_guard<std::mutex> lock(recorder->mutex_);
    recorder->launches_.emplace_back(info->symbolName != nullptr ? info->symbolName : "?", grid);
  }

  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool ok_ = false;
  std::mutex mutex_;
  std::vector<std::pair<std::string, unsigned>> launches_;
};

unsigned LargestGrid(const std::vector<std::pair<std::string, unsigned>>& launches) {
  unsigned largest = 0;
  for (const auto& launch : launches) largest = std::max(largest, launch.second);
  return largest;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The first kCount values of each of AdamW's inputs.
AdamWInputs Inputs(std::mt19937& random) {
  AdamWInputs inputs = RandomAdamWInputs(random, kCount);
  for (std::vector<float>* values :
       {&inputs.param, &inputs.grad, &inputs.exp_avg, &inputs.exp_avg_sq}) {
    values->resize(kCount);
  }
  return inputs;
}

TEST_F(CudaOptimizerSmsTest, ACappedGridGivesTheUncappedBits) {
  const AdamWInputs in = Inputs(random_);
  cuda::AdamWStepParams step;
  step.lr = 1e-3;
  step.weight_decay = 0.1;
  step.step = 4;
  const cudaStream_t stream = RawStream(gpu_stream());
  const int64_t scratch = cuda::SumOfSquaresScratchFloats(kCount);
  struct Run {
    Tensor param, grad, exp_avg, exp_avg_sq, high, low, sum, partials;
    std::vector<std::pair<std::string, unsigned>> launches;  // the optimizer's kernels' grids
  };
  LaunchedGrids grids;
  ASSERT_TRUE(grids.ok()) << "CUPTI's runtime callbacks are not available";
  // The fp32 update, the update fused with the sum, the split update with the sum, the sum alone.
  enum class Kind { kAdamW, kFused, kSplit, kSum };
  auto run = [&](int64_t grid_limit, Kind kind) {
    Run r{Upload(in.param, DType::kF32, {kCount}),
          Upload(in.grad, DType::kF32, {kCount}),
          Upload(in.exp_avg, DType::kF32, {kCount}),
          Upload(in.exp_avg_sq, DType::kF32, {kCount}),
          NewDevice(DType::kBF16, {kCount}),
          NewDevice(DType::kBF16, {kCount}),
          Poisoned(DType::kF32, {1}),
          NewDevice(DType::kF32, {scratch}),
          {}};
    step.grid_limit = grid_limit;
    grids.Take();  // the uploads' launches, if any, are not the optimizer's
    absl::Status status;
    if (kind == Kind::kAdamW) {
      status = cuda::AdamWStep(r.param.as<float>(), r.grad.as<float>(), r.exp_avg.as<float>(),
                               r.exp_avg_sq.as<float>(), kCount, step, stream);
    } else if (kind == Kind::kFused) {
      status = cuda::AdamWStepWithSquareSum(
          r.param.as<float>(), r.grad.as<float>(), r.exp_avg.as<float>(), r.exp_avg_sq.as<float>(),
          kCount, step, r.partials.as<float>(), r.sum.as<float>(), stream);
    } else if (kind == Kind::kSplit) {
      std::vector<uint16_t> high(kCount), low(kCount);
      for (int64_t i = 0; i < kCount; ++i) {
        const SplitHalves halves = SplitFloat(in.param[i]);
        high[i] = halves.high;
        low[i] = halves.low;
      }
      EXPECT_TRUE(cuda_->CopyToDevice(high.data(), r.high, gpu_stream()).ok());
      EXPECT_TRUE(cuda_->CopyToDevice(low.data(), r.low, gpu_stream()).ok());
      grids.Take();
      status = cuda::AdamWStepSplit(static_cast<uint16_t*>(r.high.data),
                                    static_cast<uint16_t*>(r.low.data), r.grad.as<float>(),
                                    r.exp_avg.as<float>(), r.exp_avg_sq.as<float>(), kCount, step,
                                    r.partials.as<float>(), r.sum.as<float>(), stream);
    } else {
      status = cuda::SumOfSquaresFloat(r.grad.as<float>(), kCount, r.partials.as<float>(),
                                       r.sum.as<float>(), stream, grid_limit);
    }
    EXPECT_TRUE(status.ok()) << status;
    r.launches = grids.Take();
    return r;
  };
  for (const Kind kind : {Kind::kAdamW, Kind::kFused, Kind::kSplit, Kind::kSum}) {
    for (const int64_t cap : {int64_t{7}, int64_t{1}, int64_t{1} << 20}) {
      SCOPED_TRACE(::testing::Message()
                   << "kind " << static_cast<int>(kind) << ", at most " << cap << " blocks");
      const Run uncapped = run(0, kind), capped = run(cap, kind);
      // The launched grids: none above the cap, and the largest is the cap wherever the uncapped
      // work has more blocks (1,000,003 elements always have more than 7), so a cap that is
      // ignored fails here even though its bits would match.
      ASSERT_FALSE(uncapped.launches.empty()) << "no launch was recorded";
      const unsigned uncapped_largest = LargestGrid(uncapped.launches);
      ASSERT_GT(uncapped_largest, 7u) << "the uncapped work must need more than 7 blocks";
      for (const auto& [kernel, grid] : capped.launches) {
        EXPECT_LE(grid, static_cast<uint64_t>(cap)) << kernel;
      }
      EXPECT_EQ(LargestGrid(capped.launches),
                std::min<uint64_t>(static_cast<uint64_t>(cap), uncapped_largest));
      if (kind != Kind::kSum) {
        EXPECT_TRUE(SameBits(Download(capped.exp_avg), Download(uncapped.exp_avg)));
        EXPECT_TRUE(SameBits(Download(capped.exp_avg_sq), Download(uncapped.exp_avg_sq)));
      }
      if (kind == Kind::kAdamW || kind == Kind::kFused) {
        EXPECT_TRUE(SameBits(Download(capped.param), Download(uncapped.param)));
      }
      if (kind == Kind::kSplit) {
        std::vector<uint16_t> a(kCount), b(kCount);
        ASSERT_TRUE(cuda_->CopyToHost(capped.high, a.data(), gpu_stream()).ok());
        ASSERT_TRUE(cuda_->CopyToHost(uncapped.high, b.data(), gpu_stream()).ok());
        EXPECT_EQ(a, b) << "high halves";
        ASSERT_TRUE(cuda_->CopyToHost(capped.low, a.data(), gpu_stream()).ok());
        ASSERT_TRUE(cuda_->CopyToHost(uncapped.low, b.data(), gpu_stream()).ok());
        EXPECT_EQ(a, b) << "low halves";
      }
      if (kind != Kind::kAdamW) {
        const std::vector<float> sum = Download(capped.sum);
        EXPECT_FALSE(std::isnan(sum[0])) << "the sum was written";
        EXPECT_TRUE(SameBits(sum, Download(uncapped.sum)));
      }
    }
  }
  step.grid_limit = -1;
  const absl::Status negative =
      cuda::AdamWStep(nullptr, nullptr, nullptr, nullptr, 0, step, stream);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << negative;
}

TEST_F(CudaOptimizerSmsTest, TheBackendTakesFromOneToTheDevicesSmsLessOne) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (const int bad : {sms, -1}) {
    CudaBackendConfig config;
    config.optimizer_sms = bad;
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(config);
    ASSERT_FALSE(backend.ok()) << bad;
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(backend.status().message().find(absl::StrCat("must be from 1 to ", sms - 1)),
              std::string::npos)
        << backend.status();
  }
  // Through the ops: the same AdamW bits from a backend whose optimizer keeps to 16 SMs.
  CudaBackendConfig config;
  config.optimizer_sms = 16;
  absl::StatusOr<std::unique_ptr<CudaBackend>> capped = CudaBackend::Create(config);
  ASSERT_TRUE(capped.ok()) << capped.status();
  const AdamWInputs in = Inputs(random_);
  AdamWParams params;
  params.step = 2;
  std::vector<std::vector<float>> results;
  for (CudaBackend* backend : {cuda_.get(), capped->get()}) {
    std::vector<std::unique_ptr<Buffer>> buffers;
    auto upload = [&](const std::vector<float>& values) {
      buffers.push_back(*backend->Allocate(kCount * 4));
      const Tensor tensor = buffers.back()->View(DType::kF32, {kCount});
      EXPECT_TRUE(backend->CopyToDevice(values.data(), tensor, backend->compute_stream()).ok());
      return tensor;
    };
    const Tensor p = upload(in.param), g = upload(in.grad);
    const Tensor m = upload(in.exp_avg), v = upload(in.exp_avg_sq);
    ASSERT_TRUE(backend->ops().AdamW(p, g, m, v, params, backend->compute_stream()).ok());
    results.emplace_back(kCount);
    ASSERT_TRUE(backend->CopyToHost(p, results.back().data(), backend->compute_stream()).ok());
  }
  EXPECT_TRUE(SameBits(results[0], results[1]));
}

}  // namespace
}  // namespace fsdpd::testing
