#include "worker/comm/local_communicator.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/comm/checked_communicator.h"
#include "worker/comm/gloo_communicator.h"

namespace fsdpd {
namespace {

absl::Status Aborted(const char* operation) {
  return absl::CancelledError(absl::StrCat(operation, ": communicator was aborted"));
}

}  // namespace

std::unique_ptr<Communicator> LocalCommunicator::Create(StreamCopy device_copy) {
  return Checked(std::unique_ptr<Communicator>(new LocalCommunicator(std::move(device_copy))));
}

// Over one rank, a gather and a sum or average are the rank's own values.
absl::Status LocalCommunicator::AllGather(const Tensor& shard, const Tensor& full, Stream& stream) {
  if (aborted_) return Aborted("AllGather");
  return Copy(shard, full, stream);
}

absl::Status LocalCommunicator::ReduceScatter(const Tensor& full, const Tensor& shard,
                                              ReduceOp /*op*/, Stream& stream) {
  if (aborted_) return Aborted("ReduceScatter");
  return Copy(full, shard, stream);
}

absl::Status LocalCommunicator::AllReduce(const Tensor& /*values*/, ReduceOp /*op*/,
                                          Stream& stream) {
  if (aborted_) return Aborted("AllReduce");
  return device_copy_ ? absl::OkStatus() : stream.Synchronize();
}

absl::Status LocalCommunicator::Copy(const Tensor& src, const Tensor& dst, Stream& stream) {
  if (src.data == dst.data) return absl::OkStatus();  // in place: already there
  if (device_copy_) return device_copy_(src, dst, stream);
  if (absl::Status status = stream.Synchronize(); !status.ok()) return status;
  std::memmove(dst.data, src.data, dst.bytes());
  return absl::OkStatus();
}

absl::Status LocalCommunicator::Barrier() {
  if (aborted_) return Aborted("Barrier");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const CommunicatorOptions& options,
                                                                 KeyValueStore* store) {
  if (options.world_size == 1 && options.rank == 0) return LocalCommunicator::Create();
  return GlooCommunicator::Connect(options, store);
}

}  // namespace fsdpd
