#include "worker/profiler/profiling_communicator.h"

namespace fsdpd {

absl::Status ProfilingCommunicator::AllGather(const Tensor& shard, const Tensor& full,
                                              Stream& stream) {
  return Run("all_gather", &full, [&] { return inner_->AllGather(shard, full, stream); });
}

absl::Status ProfilingCommunicator::ReduceScatter(const Tensor& full, const Tensor& shard,
                                                  ReduceOp op, Stream& stream) {
  return Run("reduce_scatter", &full,
             [&] { return inner_->ReduceScatter(full, shard, op, stream); });
}

absl::Status ProfilingCommunicator::AllReduce(const Tensor& values, ReduceOp op, Stream& stream) {
  return Run("all_reduce", &values, [&] { return inner_->AllReduce(values, op, stream); });
}

absl::Status ProfilingCommunicator::Barrier() {
  return Run("barrier", nullptr, [&] { return inner_->Barrier(); });
}

}  // namespace fsdpd
