#include "worker/device/cpu_runtime.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/backend/cpu_backend.h"
#include "worker/device/cgroup_memory.h"

namespace fsdpd {
namespace {

int64_t HostMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page_size);
}

}  // namespace

absl::StatusOr<DeviceInfo> CpuRuntime::Describe() const {
  DeviceInfo info;
  info.kind = "cpu";
  // What this process may use: a memory cgroup's limit binds before the host's RAM does.
  info.memory_bytes = UsableHostMemory(HostMemoryBytes(), ReadCgroupMemory());
  return info;
}

absl::StatusOr<std::unique_ptr<Backend>> CpuRuntime::CreateBackend() const {
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>());
}

absl::StatusOr<std::unique_ptr<Communicator>> CpuRuntime::CreateCommunicator(
    const CommunicatorOptions& options, KeyValueStore* store) const {
  return fsdpd::CreateCommunicator(options, store);
}

absl::StatusOr<double> CpuRuntime::PeakFlops(Backend& backend) const {
  return MeasuredPeakFlops(backend);
}

// /proc/self/statm's second field: resident pages.
MemoryInUse CpuRuntime::ProcessMemory() const {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0;
  int64_t resident_pages = 0;
  if (!(statm >> total_pages >> resident_pages)) return {};
  return MemoryInUse{resident_pages * static_cast<int64_t>(::sysconf(_SC_PAGESIZE)), "process-rss"};
}

absl::StatusOr<double> MeasuredPeakFlops(Backend& backend) {
  if (const char* configured = std::getenv("FSDPD_PEAK_FLOPS"); configured != nullptr) {
    double flops = 0.0;
    if (!absl::SimpleAtod(configured, &flops) || !(flops > 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FSDPD_PEAK_FLOPS must be a positive number of FLOP/s, got '", configured, "'"));
    }
    return flops;
  }
  constexpr int64_t kSize = 512;
  const int64_t bytes = kSize * kSize * static_cast<int64_t>(sizeof(float));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> x, backend.Allocate(bytes));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> weight, backend.Allocate(bytes));
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> out, backend.Allocate(bytes));
  const DType dtype = backend.activation_dtype();
  const Tensor x_view = x->View(dtype, {kSize, kSize});
  const Tensor weight_view = weight->View(dtype, {kSize, kSize});
  const Tensor out_view = out->View(dtype, {kSize, kSize});
  Stream& stream = backend.compute_stream();
  FSDPD_RETURN_IF_ERROR(backend.ops().Fill(x_view, 0.5f, stream));
  FSDPD_RETURN_IF_ERROR(backend.ops().Fill(weight_view, 0.25f, stream));
  double best_seconds = 1e30;
  for (int repeat = 0; repeat < 4; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    FSDPD_RETURN_IF_ERROR(
        backend.ops().LinearForward(x_view, weight_view, Tensor{}, out_view, stream));
    FSDPD_RETURN_IF_ERROR(stream.Synchronize());
    best_seconds =
        std::min(best_seconds,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return 2.0 * kSize * kSize * kSize / std::max(best_seconds, 1e-9);
}

}  // namespace fsdpd
