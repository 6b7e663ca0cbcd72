#include "worker/comm/gloo_communicator.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>

#include "absl/strings/str_cat.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/transport/context.h"
#include "gloo/transport/device.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"
#include "spdlog/spdlog.h"
#include "worker/comm/checked_communicator.h"
#include "worker/comm/mesh_exchange.h"

namespace fsdpd {
namespace {

// Outside Gloo's own slot prefixes (0x01..0x08), so our ring never matches their messages.
constexpr uint8_t kRingReduceScatterSlotPrefix = 0x40;

// A Gloo context whose full mesh is connected through ExchangeMeshAddresses: three calls to the
// store per rank, where Gloo's connectFullMesh makes 1.5 per peer and reads every peer's whole
// address list (worker/comm/mesh_exchange.h). Pairs, addresses and connections are Gloo's own.
class MeshContext : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}

  void Connect(KeyValueStore& store, std::shared_ptr<gloo::transport::Device> device) {
    std::shared_ptr<gloo::transport::Context> transport = device->createContext(rank, size);
    transport->setTimeout(getTimeout());
    MeshExchange exchange;
    exchange.prefix = "gloo/";
    exchange.rank = rank;
    exchange.size = size;
    exchange.host = HostName();
    exchange.timeout = getTimeout();
    exchange.addresses.resize(size);
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      std::vector<char> bytes = transport->createPair(peer)->address().bytes();
      exchange.addresses[peer].assign(bytes.begin(), bytes.end());
    }
    absl::StatusOr<MeshPeers> peers = ExchangeMeshAddresses(store, exchange);
    if (!peers.ok()) throw gloo::IoException(peers.status().ToString());
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      std::unique_ptr<gloo::transport::Pair>& pair = transport->getPair(peer);
      pair->setLocalRank(peers->local_rank);
      const std::string& address = peers->peer_addresses[peer];
      pair->connect(std::vector<char>(address.begin(), address.end()));
    }
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }

 private:
  static std::string HostName() {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0) return "";
    return name;
  }
};

using ReduceFunctionPointer = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFunctionPointer ReduceFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return static_cast<ReduceFunctionPointer>(&gloo::max<T>);
    case ReduceOp::kMin:
      return static_cast<ReduceFunctionPointer>(&gloo::min<T>);
    default:
      return static_cast<ReduceFunctionPointer>(&gloo::sum<T>);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicator::Connect(
    const CommunicatorOptions& options, KeyValueStore* store) {
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> gloo = ConnectUnchecked(options, store);
  if (!gloo.ok()) return gloo.status();
  return Checked(std::move(*gloo));
}

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::ConnectUnchecked(
    const CommunicatorOptions& options, KeyValueStore* store) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("Gloo communicator needs a rendezvous store");
  }
  if (options.world_size < 2 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("Gloo communicator: rank ", options.rank,
                                                   " is not valid for world size ",
                                                   options.world_size));
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.bind_address;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<MeshContext>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    context->Connect(*store, device);
    // A rank's side of the mesh can be complete while a peer is still handshaking; without
    // this barrier a rank that fails right after connecting could break its peers' connect.
    gloo::BarrierOptions barrier(context);
    barrier.setTimeout(options.timeout);
    gloo::barrier(barrier);
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(options, std::move(context)));
  } catch (const std::exception& error) {
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, " of ", options.world_size,
                                               " could not connect to its peers over Gloo (",
                                               options.bind_address, "): ", error.what()));
  }
}

template <typename Body>
absl::Status GlooCommunicator::Run(const char* operation, int64_t bytes, Body&& body) {
  if (aborted_.load()) {
    return absl::CancelledError(absl::StrCat(operation, ": communicator was aborted"));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status status;
  try {
    body();
  } catch (const std::exception& error) {
    status = absl::UnavailableError(absl::StrCat(
        operation, " failed on rank ", options_.rank, " of ", options_.world_size,
        " (a peer died or timed out after ", options_.timeout.count(), " ms): ", error.what()));
  }
  if (status.ok() && aborted_.load()) {
    status = absl::CancelledError(absl::StrCat(operation, ": communicator was aborted"));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.blocked_seconds += seconds;
  stats_.operations += 1;
  stats_.bytes_sent += bytes;
  return status;
}

absl::Status GlooCommunicator::AllGather(const Tensor& shard, const Tensor& full, Stream& stream) {
  if (absl::Status status = stream.Synchronize(); !status.ok()) return status;
  char* output = static_cast<char*>(full.data);
  const int64_t shard_bytes = shard.bytes();
  return Run("AllGather", shard_bytes, [&] {
    gloo::AllgatherOptions gather(context_);
    // Gloo gathers in place when no input is given: this rank's slice must already hold it.
    char* own_slice = output + shard_bytes * rank();
    if (shard.data != own_slice) std::memcpy(own_slice, shard.data, shard_bytes);
    gather.setOutput<char>(output, static_cast<size_t>(full.bytes()));
    gather.setTag(next_tag_++);
    gather.setTimeout(options_.timeout);
    gloo::allgather(gather);
  });
}

void GlooCommunicator::RingReduceScatter(const float* full, float* shard, int64_t shard_numel) {
  // Step s sends the partial sum of chunk (r − s − 1) to the next rank and adds the previous
  // rank's partial sum of chunk (r − s − 2) to its own; after world − 1 steps this rank holds
  // the full sum of chunk r. Partial sums alternate between two halves of a scratch buffer so
  // that a chunk in flight is never overwritten.
  const int world = world_size();
  const int me = rank();
  const int next = (me + 1) % world;
  const int previous = (me - 1 + world) % world;
  const size_t chunk_bytes = static_cast<size_t>(shard_numel) * sizeof(float);
  receive_scratch_.resize(static_cast<size_t>(shard_numel) * 3);
  float* received = receive_scratch_.data();
  float* partial[2] = {received + shard_numel, received + 2 * shard_numel};
  auto chunk = [&](int index) { return ((index % world) + world) % world; };

  const uint64_t slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, next_tag_++);
  auto receive_buffer = context_->createUnboundBuffer(received, chunk_bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> partial_buffers[2] = {
      context_->createUnboundBuffer(partial[0], chunk_bytes),
      context_->createUnboundBuffer(partial[1], chunk_bytes)};
  // Sending never writes to the buffer, so this rank's own chunk goes out straight from full.
  auto first_buffer = context_->createUnboundBuffer(
      const_cast<float*>(full + chunk(me - 1) * shard_numel), chunk_bytes);

  for (int step = 0; step < world - 1; ++step) {
    gloo::transport::UnboundBuffer* outgoing =
        step == 0 ? first_buffer.get() : partial_buffers[(step - 1) % 2].get();
    outgoing->send(next, slot);
    receive_buffer->recv(previous, slot);
    GLOO_ENFORCE(receive_buffer->waitRecv(options_.timeout), "reduce-scatter receive aborted");
    const float* own = full + chunk(me - step - 2) * shard_numel;
    float* sum = step == world - 2 ? shard : partial[step % 2];
    for (int64_t i = 0; i < shard_numel; ++i) sum[i] = own[i] + received[i];
    GLOO_ENFORCE(outgoing->waitSend(options_.timeout), "reduce-scatter send aborted");
  }
}

// f32, sum or average (the contract): a sum over the ring, scaled for an average.
absl::Status GlooCommunicator::ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                                             Stream& stream) {
  if (absl::Status status = stream.Synchronize(); !status.ok()) return status;
  const int64_t shard_numel = shard.numel();
  absl::Status status = Run("ReduceScatter", full.bytes(), [&] {
    if (shard_numel > 0) {
      RingReduceScatter(full.as<float>(), shard.as<float>(), shard_numel);
    }
  });
  if (status.ok() && op == ReduceOp::kAverage) {
    const float scale = 1.0f / static_cast<float>(world_size());
    float* values = shard.as<float>();
    for (int64_t i = 0; i < shard_numel; ++i) values[i] *= scale;
  }
  return status;
}

// f32 or i32, an average only of f32 (the contract).
absl::Status GlooCommunicator::AllReduce(const Tensor& values, ReduceOp op, Stream& stream) {
  if (absl::Status status = stream.Synchronize(); !status.ok()) return status;
  const size_t count = static_cast<size_t>(values.numel());
  absl::Status status = Run("AllReduce", values.bytes(), [&] {
    if (count == 0) return;
    gloo::AllreduceOptions reduce(context_);
    reduce.setTag(next_tag_++);
    reduce.setTimeout(options_.timeout);
    if (values.dtype == DType::kF32) {
      reduce.setOutput(values.as<float>(), count);
      reduce.setReduceFunction(ReduceFunction<float>(op));
    } else {
      reduce.setOutput(values.as<int32_t>(), count);
      reduce.setReduceFunction(ReduceFunction<int32_t>(op));
    }
    gloo::allreduce(reduce);
  });
  if (status.ok() && op == ReduceOp::kAverage) {
    const float scale = 1.0f / static_cast<float>(world_size());
    for (size_t i = 0; i < count; ++i) values.as<float>()[i] *= scale;
  }
  return status;
}

absl::Status GlooCommunicator::Barrier() {
  return Run("Barrier", 0, [&] {
    gloo::BarrierOptions barrier(context_);
    barrier.setTag(next_tag_++);
    barrier.setTimeout(options_.timeout);
    gloo::barrier(barrier);
  });
}

void GlooCommunicator::Abort() {
  if (!aborted_.exchange(true)) {
    spdlog::warn("rank {}: communicator aborted", options_.rank);
  }
}

CommunicatorStats GlooCommunicator::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

}  // namespace fsdpd
