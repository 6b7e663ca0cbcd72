#include "worker/trainer_support.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#ifdef FSDPD_HAS_CUDA
#include "worker/trainer_device.h"
#endif

namespace fsdpd {
namespace {

template <typename T>
absl::Status AllReduceHost(Communicator& communicator, Backend& backend, DType dtype,
                           std::vector<T>* values, ReduceOp op) {
  if (values->empty()) return absl::OkStatus();
  const int64_t count = static_cast<int64_t>(values->size());
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                         backend.Allocate(count * static_cast<int64_t>(sizeof(T))));
  const Tensor device = buffer->View(dtype, {count});
  Stream& stream = backend.comm_stream();
  FSDPD_RETURN_IF_ERROR(backend.CopyToDevice(values->data(), device, stream));
  FSDPD_RETURN_IF_ERROR(communicator.AllReduce(device, op, stream));
  return backend.CopyToHost(device, values->data(), stream);
}

// /proc/self/statm's second field: resident pages.
MemoryInUse ResidentSetSize() {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0;
  int64_t resident_pages = 0;
  if (!(statm >> total_pages >> resident_pages)) return {};
  return MemoryInUse{resident_pages * static_cast<int64_t>(::sysconf(_SC_PAGESIZE)), "process-rss"};
}

}  // namespace

MemoryInUse RankMemoryInUse(const std::string& device) {
#ifdef FSDPD_HAS_CUDA
  absl::StatusOr<int> index = ParseCudaDevice(device);
  if (index.ok()) {
    absl::StatusOr<MemoryInUse> used = DeviceMemoryInUse(*index);
    return used.ok() ? *used : MemoryInUse{};
  }
#endif
  return ResidentSetSize();
}

absl::Status AllReduceHostFloats(Communicator& communicator, Backend& backend,
                                 std::vector<float>* values, ReduceOp op) {
  return AllReduceHost(communicator, backend, DType::kF32, values, op);
}

absl::Status AllReduceHostInts(Communicator& communicator, Backend& backend,
                               std::vector<int32_t>* values, ReduceOp op) {
  return AllReduceHost(communicator, backend, DType::kI32, values, op);
}

absl::StatusOr<double> PeakFlopsPerRank(Backend& backend) {
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

std::chrono::milliseconds CommunicatorTimeout() {
  double seconds = 60.0;
  if (const char* configured = std::getenv("FSDPD_COMM_TIMEOUT_SECONDS"); configured != nullptr) {
    double parsed = 0.0;
    if (absl::SimpleAtod(configured, &parsed) && parsed > 0.0) seconds = parsed;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace fsdpd
