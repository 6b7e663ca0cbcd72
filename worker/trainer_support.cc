#include "worker/trainer_support.h"

#include <cstdlib>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/env_choice.h"
#include "base/status_macros.h"

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

}  // namespace

absl::Status AllReduceHostFloats(Communicator& communicator, Backend& backend,
                                 std::vector<float>* values, ReduceOp op) {
  return AllReduceHost(communicator, backend, DType::kF32, values, op);
}

absl::Status AllReduceHostInts(Communicator& communicator, Backend& backend,
                               std::vector<int32_t>* values, ReduceOp op) {
  return AllReduceHost(communicator, backend, DType::kI32, values, op);
}

absl::StatusOr<std::chrono::milliseconds> CommunicatorTimeout() {
  double seconds = 60.0;
  if (const char* configured = std::getenv("FSDPD_COMM_TIMEOUT_SECONDS"); configured != nullptr) {
    if (!absl::SimpleAtod(configured, &seconds) || !(seconds > 0.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("FSDPD_COMM_TIMEOUT_SECONDS must be a positive number of seconds, got '",
                       configured, "'"));
    }
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

absl::StatusOr<bool> OptimizerOnCommStream() {
  FSDPD_ASSIGN_OR_RETURN(const std::string stream,
                         EnvChoice("FSDPD_OPTIMIZER_STREAM", {"compute", "comm"}));
  FSDPD_ASSIGN_OR_RETURN(const int64_t optimizer_sms, EnvCount("FSDPD_OPTIMIZER_SMS"));
  if (optimizer_sms > 0 && stream != "comm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "FSDPD_OPTIMIZER_SMS=", optimizer_sms,
        " needs FSDPD_OPTIMIZER_STREAM=comm: on the compute stream a capped optimizer only runs "
        "slower"));
  }
  return stream == "comm";
}

absl::StatusOr<bool> SplitMaster() {
  FSDPD_ASSIGN_OR_RETURN(const std::string layout,
                         EnvChoice("FSDPD_MASTER_LAYOUT", {"split", "fp32"}));
  return layout != "fp32";
}

absl::StatusOr<int> PrefetchUnits() {
  FSDPD_ASSIGN_OR_RETURN(const std::string units,
                         EnvChoice("FSDPD_PREFETCH_UNITS", {"1", "2", "3"}));
  return units.empty() ? 1 : units[0] - '0';
}

}  // namespace fsdpd
