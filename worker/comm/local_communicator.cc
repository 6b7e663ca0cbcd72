#include "worker/comm/local_communicator.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/comm/gloo_communicator.h"

namespace fsdpd {
namespace {

absl::Status Aborted(const char* operation) {
  return absl::CancelledError(absl::StrCat(operation, ": communicator was aborted"));
}

}  // namespace

absl::Status LocalCommunicator::AllGather(const Tensor& shard, const Tensor& full, Stream& stream) {
  if (aborted_) return Aborted("AllGather");
  if (shard.dtype != full.dtype || shard.numel() != full.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllGather: shard ", shard.Describe(), " does not match ", full.Describe()));
  }
  return Copy(shard, full, stream);
}

absl::Status LocalCommunicator::ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                                              Stream& stream) {
  if (aborted_) return Aborted("ReduceScatter");
  if (full.dtype != DType::kF32 || shard.dtype != DType::kF32 || shard.numel() != full.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("ReduceScatter: shard ", shard.Describe(),
                                                   " does not match ", full.Describe()));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    return absl::InvalidArgumentError("ReduceScatter supports only sum and average");
  }
  return Copy(full, shard, stream);
}

absl::Status LocalCommunicator::AllReduce(const Tensor& values, ReduceOp op, Stream& stream) {
  if (aborted_) return Aborted("AllReduce");
  if (values.dtype != DType::kF32 && values.dtype != DType::kI32) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllReduce supports fp32 and int32, got ", values.Describe()));
  }
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
  if (options.world_size == 1 && options.rank == 0) {
    return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());
  }
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> gloo =
      GlooCommunicator::Connect(options, store);
  if (!gloo.ok()) return gloo.status();
  return std::unique_ptr<Communicator>(std::move(*gloo));
}

}  // namespace fsdpd
