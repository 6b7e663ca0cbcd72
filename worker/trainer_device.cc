#include "worker/trainer_device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/backend/cuda_backend.h"
#include "worker/backend/cuda_check.h"
#include "worker/comm/nccl_communicator.h"

namespace fsdpd {

absl::StatusOr<int> ParseCudaDevice(const std::string& device) {
  int index = -1;
  if (device.rfind("cuda:", 0) != 0 || !absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", device, "' is not a CUDA device (expected cuda:N)"));
  }
  return index;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int index) {
  CudaBackendConfig config;
  config.device = index;
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(config);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommunicatorOptions& options, int device, KeyValueStore* store) {
  NcclCommunicatorOptions nccl;
  nccl.rank = options.rank;
  nccl.world_size = options.world_size;
  nccl.device = device;
  nccl.timeout = options.timeout;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> communicator =
      NcclCommunicator::Connect(nccl, store);
  if (!communicator.ok()) return communicator.status();
  return std::unique_ptr<Communicator>(std::move(*communicator));
}

absl::StatusOr<DriverMemory> QueryDriverMemory(int index) {
  CUDA_CHECK(cudaSetDevice(index));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  DriverMemory memory;
  memory.total_bytes = static_cast<int64_t>(total_bytes);
  memory.used_bytes = static_cast<int64_t>(total_bytes - free_bytes);
  return memory;
}

absl::StatusOr<double> CudaPeakBf16Flops(int index) {
  int major = 0;
  int multiprocessors = 0;
  int clock_kilohertz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index));
  CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, index));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_kilohertz, cudaDevAttrClockRate, index));
  double flops_per_clock = 0.0;
  if (major == 8) flops_per_clock = 2048.0;
  if (major == 9) flops_per_clock = 4096.0;
  if (major == 10) flops_per_clock = 8192.0;
  return flops_per_clock * multiprocessors * clock_kilohertz * 1e3;
}

absl::StatusOr<CudaDeviceDescription> DescribeCudaDevice(int index) {
  const int count = CudaBackend::DeviceCount();
  if (index < 0 || index >= count) {
    return absl::NotFoundError(absl::StrCat("cuda:", index, " does not exist (", count,
                                            " CUDA device", count == 1 ? "" : "s", " visible)"));
  }
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  CudaDeviceDescription description;
  description.name = properties.name;
  description.memory_bytes = static_cast<int64_t>(properties.totalGlobalMem);
  const auto* uuid = reinterpret_cast<const unsigned char*>(properties.uuid.bytes);
  description.uuid =
      absl::StrFormat("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                      uuid[0], uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7],
                      uuid[8], uuid[9], uuid[10], uuid[11], uuid[12], uuid[13], uuid[14], uuid[15]);
  return description;
}

}  // namespace fsdpd
