// Memory on a CUDA device as its driver sees it (CUDA builds only).
#include "worker/device/cuda_memory.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"

namespace fsdpd {
namespace {

// The few NVML declarations used here, so that neither the build nor the worker binary needs
// NVML: libnvidia-ml.so.1 ships with the driver and is opened at run time, if at all.
struct NvmlDeviceHandle;
using NvmlDevice = NvmlDeviceHandle*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;
// nvmlProcessInfo_t as the _v3 process queries fill it.
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
struct Nvml {
  int (*init)() = nullptr;
  int (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*compute_processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
};

// Null when the library or a symbol is missing or nvmlInit fails; loaded once per process.
const Nvml* LoadNvml() {
  static const Nvml* const nvml = []() -> const Nvml* {
    void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return nullptr;
    auto* loaded = new Nvml();
    loaded->init = reinterpret_cast<int (*)()>(::dlsym(library, "nvmlInit_v2"));
    loaded->handle_by_pci_bus_id = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(
        ::dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2"));
    loaded->compute_processes =
        reinterpret_cast<int (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*)>(
            ::dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (loaded->init == nullptr || loaded->handle_by_pci_bus_id == nullptr ||
        loaded->compute_processes == nullptr || loaded->init() != kNvmlSuccess) {
      delete loaded;
      return nullptr;
    }
    return loaded;
  }();
  return nvml;
}

// This process's device memory on `index` per NVML.
absl::StatusOr<int64_t> NvmlProcessMemory(int index) {
  const Nvml* nvml = LoadNvml();
  if (nvml == nullptr) return absl::UnavailableError("NVML (libnvidia-ml.so.1) is not available");
  char bus_id[64] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), index));
  NvmlDevice device = nullptr;
  if (nvml->handle_by_pci_bus_id(bus_id, &device) != kNvmlSuccess) {
    return absl::NotFoundError(absl::StrCat("NVML does not know the device at ", bus_id));
  }
  std::vector<NvmlProcessInfo> processes(64);
  unsigned int count = static_cast<unsigned int>(processes.size());
  int result = nvml->compute_processes(device, &count, processes.data());
  if (result == kNvmlInsufficientSize) {
    processes.resize(count + 16);
    count = static_cast<unsigned int>(processes.size());
    result = nvml->compute_processes(device, &count, processes.data());
  }
  if (result != kNvmlSuccess) {
    return absl::UnavailableError(absl::StrCat("NVML process query failed (", result, ")"));
  }
  const unsigned int pid = static_cast<unsigned int>(::getpid());
  for (unsigned int i = 0; i < count && i < processes.size(); ++i) {
    if (processes[i].pid == pid && processes[i].used_gpu_memory != kNvmlValueNotAvailable) {
      return static_cast<int64_t>(processes[i].used_gpu_memory);
    }
  }
  // Inside a PID namespace NVML lists host process ids, which never match.
  return absl::NotFoundError("NVML does not list this process");
}

}  // namespace

absl::StatusOr<MemoryInUse> DeviceMemoryInUse(int index) {
  // NVML that failed once (no library, a PID namespace) is not asked again every step.
  static std::atomic<bool> nvml_usable{true};
  if (nvml_usable.load()) {
    absl::StatusOr<int64_t> bytes = NvmlProcessMemory(index);
    if (bytes.ok()) return MemoryInUse{*bytes, "nvml-process"};
    nvml_usable.store(false);
  }
  absl::StatusOr<DriverMemory> driver = QueryDriverMemory(index);
  if (!driver.ok()) return driver.status();
  return MemoryInUse{driver->used_bytes, "cuda-mem-get-info"};
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

}  // namespace fsdpd
