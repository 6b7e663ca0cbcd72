// Helpers for the GPU tests: a CUDA backend (the test skips itself without a device), a CPU
// backend as the oracle, device tensors from host values, outputs poisoned with NaN so that an
// element a kernel forgets to write fails the comparison, and a tolerance check that reports
// the worst element.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/elementwise.h"
#include "proto/spec/job_spec.h"
#include "worker/backend/cpu_backend.h"
#include "worker/backend/cuda_backend.h"

namespace fsdpd::testing {

// Relative Frobenius distance ‖a − b‖ / ‖b‖.
inline double RelativeDistance(const std::vector<float>& a, const std::vector<float>& b) {
  double difference = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double delta = static_cast<double>(a[i]) - b[i];
    difference += delta * delta;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(difference / std::max(norm, 1e-30));
}

// Why device 0 cannot run the FP8 products (no FP8 tensor cores before sm_89), or "" when it
// can: a test of them skips itself with this reason.
inline std::string WithoutFp8TensorCores() {
  cudaDeviceProp properties;
  if (cudaGetDeviceProperties(&properties, 0) != cudaSuccess) return "no device properties";
  if (properties.major * 10 + properties.minor >= kFp8MinComputeCapability) return "";
  return absl::StrCat(properties.name, " has no FP8 tensor cores (sm_89 or newer)");
}

// The values a bf16 tensor holds for these floats.
inline std::vector<float> RoundedToBf16(std::vector<float> values) {
  for (float& value : values) value = cpu::Bfloat16ToFloat32(cpu::Float32ToBfloat16(value));
  return values;
}

inline std::vector<float> RandomValues(std::mt19937& random, int64_t count, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = normal(random);
  return values;
}

inline double RootMeanSquare(const std::vector<float>& values) {
  double sum = 0.0;
  for (float value : values) sum += static_cast<double>(value) * value;
  return values.empty() ? 0.0 : std::sqrt(sum / static_cast<double>(values.size()));
}

// |actual − expected| <= absolute + relative·|expected| for every element; NaN never passes.
inline ::testing::AssertionResult AllClose(const std::vector<float>& actual,
                                           const std::vector<float>& expected, double absolute,
                                           double relative) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << expected.size();
  }
  size_t failures = 0;
  size_t worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    const double allowed = absolute + relative * std::fabs(static_cast<double>(expected[i]));
    const double excess =
        std::isnan(error) ? std::numeric_limits<double>::infinity() : error - allowed;
    if (!(error <= allowed)) ++failures;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << actual.size() << " elements out of tolerance (absolute "
         << absolute << ", relative " << relative << "); worst at " << worst << ": actual "
         << actual[worst] << ", expected " << expected[worst];
}

// AdamW's inputs, count + 1 values each (room to offset a shard by one), with moments of the
// sizes training gives them and a non-negative second moment.
struct AdamWInputs {
  std::vector<float> param, grad, exp_avg, exp_avg_sq;
};
inline AdamWInputs RandomAdamWInputs(std::mt19937& random, int64_t count) {
  AdamWInputs inputs{RandomValues(random, count + 1), RandomValues(random, count + 1, 0.1f),
                     RandomValues(random, count + 1, 0.01f),
                     RandomValues(random, count + 1, 0.001f)};
  for (float& v : inputs.exp_avg_sq) v = std::fabs(v);
  return inputs;
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaBackend::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create({});
    ASSERT_TRUE(backend.ok()) << backend.status();
    cuda_ = std::move(*backend);
  }

  Ops& gpu() { return cuda_->ops(); }
  Stream& gpu_stream() { return cuda_->compute_stream(); }
  Ops& cpu_ops() { return cpu_.ops(); }
  Stream& cpu_stream() { return cpu_.compute_stream(); }

  Tensor NewDevice(DType dtype, std::vector<int64_t> shape) {
    Tensor tensor{nullptr, dtype, std::move(shape)};
    absl::StatusOr<std::unique_ptr<Buffer>> buffer = cuda_->Allocate(tensor.bytes());
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    if (!buffer.ok()) return tensor;
    tensor.data = (*buffer)->data();
    buffers_.push_back(std::move(*buffer));
    return tensor;
  }

  // A device tensor holding `values` (rounded when bf16).
  Tensor Upload(const std::vector<float>& values, DType dtype, std::vector<int64_t> shape) {
    Tensor tensor = NewDevice(dtype, std::move(shape));
    EXPECT_EQ(tensor.numel(), static_cast<int64_t>(values.size()));
    if (dtype == DType::kBF16) {
      std::vector<uint16_t> bits(values.size());
      cpu::CastFloat32ToBfloat16(values.data(), static_cast<int64_t>(values.size()), bits.data());
      EXPECT_TRUE(cuda_->CopyToDevice(bits.data(), tensor, gpu_stream()).ok());
    } else {
      EXPECT_TRUE(cuda_->CopyToDevice(values.data(), tensor, gpu_stream()).ok());
    }
    return tensor;
  }

  Tensor UploadIds(const std::vector<int32_t>& ids, std::vector<int64_t> shape) {
    Tensor tensor = NewDevice(DType::kI32, std::move(shape));
    EXPECT_TRUE(cuda_->CopyToDevice(ids.data(), tensor, gpu_stream()).ok());
    return tensor;
  }

  // A device tensor full of NaN: any element the op under test does not write fails.
  Tensor Poisoned(DType dtype, std::vector<int64_t> shape) {
    Tensor tensor = NewDevice(dtype, std::move(shape));
    EXPECT_TRUE(gpu().Fill(tensor, std::numeric_limits<float>::quiet_NaN(), gpu_stream()).ok());
    return tensor;
  }

  std::vector<float> Download(const Tensor& tensor) {
    std::vector<float> values(static_cast<size_t>(tensor.numel()));
    if (tensor.dtype == DType::kBF16) {
      std::vector<uint16_t> bits(values.size());
      EXPECT_TRUE(cuda_->CopyToHost(tensor, bits.data(), gpu_stream()).ok());
      cpu::CastBfloat16ToFloat32(bits.data(), tensor.numel(), values.data());
    } else {
      EXPECT_TRUE(cuda_->CopyToHost(tensor, values.data(), gpu_stream()).ok());
    }
    return values;
  }

  // A host fp32 tensor viewing `values` for the CPU oracle.
  static Tensor Host(std::vector<float>& values, std::vector<int64_t> shape) {
    return Tensor{values.data(), DType::kF32, std::move(shape)};
  }
  static Tensor HostIds(std::vector<int32_t>& ids, std::vector<int64_t> shape) {
    return Tensor{ids.data(), DType::kI32, std::move(shape)};
  }

  std::mt19937 random_{20261202};
  CpuBackend cpu_;
  std::unique_ptr<CudaBackend> cuda_;
  std::vector<std::unique_ptr<Buffer>> buffers_;

  void TearDown() override {
    buffers_.clear();
    cuda_.reset();
  }
};

}  // namespace fsdpd::testing
