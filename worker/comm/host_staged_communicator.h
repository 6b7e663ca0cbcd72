// Collectives for device buffers that go through host memory and Gloo: what the CUDA engine uses
// when two or more ranks of one job share a GPU, which NCCL refuses ("duplicate GPU"). Each
// collective copies its device input to the host, runs on the host communicator (Gloo over TCP),
// and copies the result back, all before it returns. Far slower than NCCL, but every layout,
// shard offset, padding and averaging rule of N > 1 ranks runs on the device exactly as with
// NCCL, so N CUDA ranks can be tested on a single GPU. The contract is checked once, on the
// device tensors, by the CheckedCommunicator in front of it; the Gloo communicator behind it is
// not checked again.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

// Copies between device tensors and host memory, complete when the call returns; work already
// on `stream` comes first.
class DeviceCopier {
 public:
  virtual ~DeviceCopier() = default;
  virtual absl::Status ToHost(const Tensor& device, void* host, Stream& stream) = 0;
  virtual absl::Status ToDevice(const void* host, const Tensor& device, Stream& stream) = 0;
};

class HostStagedCommunicator : public Communicator {
 public:
  // Connects a Gloo communicator (worker/comm/gloo_communicator.h) through `store` to run the
  // collectives on host copies made by `copier`; the communicator comes behind
  // CheckedCommunicator.
  static absl::StatusOr<std::unique_ptr<Communicator>> Connect(
      const CommunicatorOptions& options, KeyValueStore* store,
      std::unique_ptr<DeviceCopier> copier);

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  absl::Status AllGather(const Tensor& shard, const Tensor& full, Stream& stream) override;
  absl::Status ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                             Stream& stream) override;
  absl::Status AllReduce(const Tensor& values, ReduceOp op, Stream& stream) override;
  absl::Status Barrier() override { return host_->Barrier(); }
  void Abort() override { host_->Abort(); }
  // The host communicator's, with the copies' time counted as blocked time.
  CommunicatorStats stats() const override;

 private:
  // `host` runs the collectives on host tensors.
  HostStagedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<DeviceCopier> copier);

  // A host tensor shaped like `device`, backed by `storage`.
  static Tensor Staged(const Tensor& device, std::vector<char>& storage);

  std::unique_ptr<Communicator> host_;
  std::unique_ptr<DeviceCopier> copier_;
  std::vector<char> input_;
  std::vector<char> output_;
  double copy_seconds_ = 0.0;
};

// Whether any two ranks of the world named the same device: every rank publishes `device_id`
// (a GPU's UUID) under the store (scoped to the job and attempt) and reads all the others', so
// every rank reaches the same answer and picks the same kind of communicator.
absl::StatusOr<bool> RanksShareADevice(KeyValueStore& store, int rank, int world_size,
                                       const std::string& device_id,
                                       std::chrono::milliseconds timeout);

}  // namespace fsdpd
