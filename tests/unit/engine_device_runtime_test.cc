// CreateDeviceRuntime, the one place the device is chosen: cpu picks the CPU runtime, cuda:N
// picks the CUDA runtime where the build has it and the device exists, and every other case is
// a clear error naming --device. What cuda:N gives depends on the build (FSDPD_TEST_CUDA_BUILD,
// from tests/unit/device_runtime.cmake), never on the host: this binary hides every GPU, so a
// CUDA build sees none even on a GPU host (the GPU tests cover a visible one).
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/device/cpu_runtime.h"
#include "worker/device/device_runtime.h"

#ifndef FSDPD_TEST_CUDA_BUILD
#error "FSDPD_TEST_CUDA_BUILD must say whether this build has the CUDA backend"
#endif

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

// Before the CUDA runtime first initialises (at the first CUDA call, after static
// initialisation): no device is visible to this process.
const bool kGpusHidden = [] { return ::setenv("CUDA_VISIBLE_DEVICES", "", 1) == 0; }();

TEST(DeviceRuntime, CpuPicksTheCpuRuntime) {
  ASSERT_TRUE(kGpusHidden);
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> runtime = CreateDeviceRuntime("cpu");
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_NE(dynamic_cast<CpuRuntime*>(runtime->get()), nullptr);
  EXPECT_EQ((*runtime)->device(), "cpu");
  EXPECT_EQ((*runtime)->kind(), "cpu");

  absl::StatusOr<DeviceInfo> info = (*runtime)->Describe();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kind, "cpu");
  EXPECT_GT(info->memory_bytes, 0);

  absl::StatusOr<std::unique_ptr<Backend>> backend = (*runtime)->CreateBackend();
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->activation_dtype(), DType::kF32);
  // Waits on the CPU block the host, and host timers time its ops: nothing on a device.
  EXPECT_EQ((*runtime)->CreateStreamWaitTimer(**backend), nullptr);
  EXPECT_EQ((*runtime)->CreateDeviceProfiler(1, 1e9,
                                             [](const std::string&, const std::string&) {
                                               ADD_FAILURE()
                                                   << "the CPU runtime has nothing to warn about";
                                             }),
            nullptr);
  EXPECT_FALSE((*runtime)->DeviceMemory().has_value());
  const MemoryInUse in_use = (*runtime)->ProcessMemory();
  EXPECT_EQ(in_use.source, "process-rss");
  EXPECT_GT(in_use.bytes, 0);

  CommunicatorOptions options;
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      (*runtime)->CreateCommunicator(options, /*store=*/nullptr);
  EXPECT_TRUE(communicator.ok()) << communicator.status();
}

TEST(DeviceRuntime, CpuPeakIsMeasuredUnlessConfigured) {
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> runtime = CreateDeviceRuntime("cpu");
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  absl::StatusOr<std::unique_ptr<Backend>> backend = (*runtime)->CreateBackend();
  ASSERT_TRUE(backend.ok()) << backend.status();
  ::unsetenv("FSDPD_PEAK_FLOPS");
  absl::StatusOr<double> measured = (*runtime)->PeakFlops(**backend);
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_GT(*measured, 0.0);
  ::setenv("FSDPD_PEAK_FLOPS", "1.5e12", 1);
  absl::StatusOr<double> configured = (*runtime)->PeakFlops(**backend);
  ::unsetenv("FSDPD_PEAK_FLOPS");
  ASSERT_TRUE(configured.ok()) << configured.status();
  EXPECT_DOUBLE_EQ(*configured, 1.5e12);
}

TEST(DeviceRuntime, CudaDeviceErrorDependsOnTheBuild) {
  ASSERT_TRUE(kGpusHidden);
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> runtime = CreateDeviceRuntime("cuda:0");
  ASSERT_FALSE(runtime.ok()) << "cuda:0 was chosen with no GPU visible";
  EXPECT_THAT(runtime.status().message(), HasSubstr("--device cuda:0"));
#if FSDPD_TEST_CUDA_BUILD
  // The build has CUDA; the device is what is missing.
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kNotFound) << runtime.status();
  EXPECT_THAT(runtime.status().message(), HasSubstr("cuda:0 does not exist (0 CUDA devices"));
#else
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kUnimplemented) << runtime.status();
  EXPECT_THAT(runtime.status().message(), HasSubstr("this fsdpd-worker was built without CUDA"));
#endif
}

TEST(DeviceRuntime, MalformedDevicesNameTheFlag) {
  for (const char* device : {"cuda:x", "cuda:-1", "cuda:"}) {
    absl::StatusOr<std::unique_ptr<DeviceRuntime>> runtime = CreateDeviceRuntime(device);
    ASSERT_FALSE(runtime.ok()) << device;
    EXPECT_EQ(runtime.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_THAT(runtime.status().message(), HasSubstr("--device"));
    EXPECT_THAT(runtime.status().message(), HasSubstr(std::string("\"") + device + "\""));
    EXPECT_THAT(runtime.status().message(), HasSubstr("expected cuda:N"));
  }
  for (const char* device : {"tpu", "", "CPU", "gpu:0"}) {
    absl::StatusOr<std::unique_ptr<DeviceRuntime>> runtime = CreateDeviceRuntime(device);
    ASSERT_FALSE(runtime.ok()) << device;
    EXPECT_EQ(runtime.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_THAT(runtime.status().message(),
                HasSubstr(std::string("unknown device \"") + device + "\""));
  }
}

TEST(DeviceRuntime, JobsRunOnlyOnTheirKindOfWorker) {
  EXPECT_TRUE(CheckDevice("cpu", "cpu").ok());
  for (const auto& [job, worker] : {std::pair<const char*, const char*>{"cuda", "cpu"},
                                    {"cpu", "cuda:0"},
                                    {"cuda", "cuda:x"},
                                    {"tpu", "cpu"}}) {
    absl::Status status = CheckDevice(job, worker);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << job << " on " << worker;
    EXPECT_THAT(status.message(), HasSubstr(std::string("parallel.device '") + job + "'"));
    EXPECT_THAT(status.message(), HasSubstr(std::string("worker device '") + worker + "'"));
  }
  const absl::Status cuda_job = CheckDevice("cuda", "cuda:1");
#if FSDPD_TEST_CUDA_BUILD
  EXPECT_TRUE(cuda_job.ok()) << cuda_job;
#else
  EXPECT_EQ(cuda_job.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(cuda_job.message(), HasSubstr("this build has no CUDA backend"));
#endif
}

}  // namespace
}  // namespace fsdpd
