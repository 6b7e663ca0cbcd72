#include "worker/comm/host_staged_communicator.h"

#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/comm/checked_communicator.h"
#include "worker/comm/gloo_communicator.h"

namespace fsdpd {
namespace {

// The host communicator runs inline: its stream has nothing to wait for.
class HostStream : public Stream {
 public:
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> HostStagedCommunicator::Connect(
    const CommunicatorOptions& options, KeyValueStore* store,
    std::unique_ptr<DeviceCopier> copier) {
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> gloo,
                         GlooCommunicator::ConnectUnchecked(options, store));
  return Checked(std::unique_ptr<Communicator>(
      new HostStagedCommunicator(std::move(gloo), std::move(copier))));
}

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> host,
                                               std::unique_ptr<DeviceCopier> copier)
    : host_(std::move(host)), copier_(std::move(copier)) {}

Tensor HostStagedCommunicator::Staged(const Tensor& device, std::vector<char>& storage) {
  if (storage.size() < static_cast<size_t>(device.bytes())) storage.resize(device.bytes());
  Tensor host = device;
  host.data = storage.data();
  return host;
}

absl::Status HostStagedCommunicator::AllGather(const Tensor& shard, const Tensor& full,
                                               Stream& stream) {
  HostStream host_stream;
  const Tensor host_shard = Staged(shard, input_);
  const Tensor host_full = Staged(full, output_);
  Clock::time_point start = Clock::now();
  FSDPD_RETURN_IF_ERROR(copier_->ToHost(shard, host_shard.data, stream));
  copy_seconds_ += SecondsSince(start);
  FSDPD_RETURN_IF_ERROR(host_->AllGather(host_shard, host_full, host_stream));
  start = Clock::now();
  FSDPD_RETURN_IF_ERROR(copier_->ToDevice(host_full.data, full, stream));
  copy_seconds_ += SecondsSince(start);
  return absl::OkStatus();
}

absl::Status HostStagedCommunicator::ReduceScatter(const Tensor& full, const Tensor& shard,
                                                   ReduceOp op, Stream& stream) {
  HostStream host_stream;
  const Tensor host_full = Staged(full, input_);
  const Tensor host_shard = Staged(shard, output_);
  Clock::time_point start = Clock::now();
  FSDPD_RETURN_IF_ERROR(copier_->ToHost(full, host_full.data, stream));
  copy_seconds_ += SecondsSince(start);
  FSDPD_RETURN_IF_ERROR(host_->ReduceScatter(host_full, host_shard, op, host_stream));
  start = Clock::now();
  FSDPD_RETURN_IF_ERROR(copier_->ToDevice(host_shard.data, shard, stream));
  copy_seconds_ += SecondsSince(start);
  return absl::OkStatus();
}

absl::Status HostStagedCommunicator::AllReduce(const Tensor& values, ReduceOp op, Stream& stream) {
  HostStream host_stream;
  const Tensor host_values = Staged(values, input_);
  Clock::time_point start = Clock::now();
  FSDPD_RETURN_IF_ERROR(copier_->ToHost(values, host_values.data, stream));
  copy_seconds_ += SecondsSince(start);
  FSDPD_RETURN_IF_ERROR(host_->AllReduce(host_values, op, host_stream));
  start = Clock::now();
  FSDPD_RETURN_IF_ERROR(copier_->ToDevice(host_values.data, values, stream));
  copy_seconds_ += SecondsSince(start);
  return absl::OkStatus();
}

CommunicatorStats HostStagedCommunicator::stats() const {
  CommunicatorStats stats = host_->stats();
  stats.blocked_seconds += copy_seconds_;
  return stats;
}

absl::StatusOr<bool> RanksShareADevice(KeyValueStore& store, int rank, int world_size,
                                       const std::string& device_id,
                                       std::chrono::milliseconds timeout) {
  const std::string prefix = "fsdpd/device/";
  FSDPD_RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, rank), device_id));
  std::set<std::string> seen;
  bool shared = false;
  for (int other = 0; other < world_size; ++other) {
    absl::StatusOr<std::string> id = store.Get(absl::StrCat(prefix, other), timeout);
    if (!id.ok()) {
      return absl::Status(id.status().code(),
                          absl::StrCat("rank ", rank, ": waiting for rank ", other,
                                       " to name its device: ", id.status().message()));
    }
    if (!seen.insert(*id).second) shared = true;
  }
  return shared;
}

}  // namespace fsdpd
