#include "worker/comm/nccl_communicator.h"

#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/cuda_check.h"
#include "spdlog/spdlog.h"
#include "worker/backend/cuda_backend.h"
#include "worker/comm/checked_communicator.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<ncclDataType_t> NcclTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL collectives take fp32, bf16 or int32, not dtype ", DTypeName(dtype)));
  }
}

ncclRedOp_t NcclOpOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// Waits while a non-blocking communicator is still working on its last call (creation,
// finalisation or an enqueue that needs a connection first), bounded by `deadline`.
ncclResult_t WaitWhileInProgress(ncclComm_t comm, ncclResult_t result, Clock::time_point deadline) {
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ncclResult_t async_result = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm, &async_result);
    result = query != ncclSuccess ? query : async_result;
  }
  return result;
}

absl::Status NcclStatus(ncclResult_t result, const char* statement, const char* file, int line,
                        int rank) {
  SetCudaCheckRank(rank);
  if (result == ncclInProgress) {
    return absl::DeadlineExceededError(absl::StrCat(statement, " still in progress after the ",
                                                    "collective timeout at ",
                                                    CudaErrorLocation(file, line)));
  }
  const char* last_error = ncclGetLastError(nullptr);
  absl::Status status =
      LibraryErrorStatus("NCCL", result, ncclGetErrorString(result), statement, file, line);
  if (last_error != nullptr && last_error[0] != '\0') {
    return absl::Status(status.code(), absl::StrCat(status.message(), ": ", last_error));
  }
  return status;
}

absl::StatusOr<std::string> ReadUniqueId(const NcclCommunicatorOptions& options,
                                         KeyValueStore* store, ncclUniqueId* id) {
  if (options.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(id));
    const std::string encoded =
        absl::BytesToHexString(absl::string_view(id->internal, sizeof(id->internal)));
    if (options.world_size > 1) {
      if (absl::Status status = store->Set(kNcclUniqueIdKey, encoded); !status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat("publishing the NCCL unique id: ", status.message()));
      }
    }
    return encoded;
  }
  absl::StatusOr<std::string> encoded = store->Get(kNcclUniqueIdKey, options.timeout);
  if (!encoded.ok()) {
    return absl::Status(
        encoded.status().code(),
        absl::StrCat("rank ", options.rank,
                     " waiting for rank 0's NCCL unique id: ", encoded.status().message()));
  }
  const std::string bytes = absl::HexStringToBytes(*encoded);
  if (bytes.size() != sizeof(id->internal) ||
      absl::BytesToHexString(bytes) != absl::AsciiStrToLower(*encoded)) {
    return absl::DataLossError(absl::StrCat("the store's '", kNcclUniqueIdKey, "' is not a ",
                                            sizeof(id->internal), "-byte hex NCCL unique id (",
                                            encoded->size(), " characters)"));
  }
  std::memcpy(id->internal, bytes.data(), sizeof(id->internal));
  return *encoded;
}

}  // namespace

#define NCCL_COMPLETE(statement) Complete((statement), #statement, __FILE__, __LINE__)

NcclCommunicator::NcclCommunicator(const NcclCommunicatorOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Connect(
    const NcclCommunicatorOptions& options, KeyValueStore* store) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL communicator: rank ", options.rank,
                                                   " is outside world size ", options.world_size));
  }
  if (options.world_size > 1 && store == nullptr) {
    return absl::InvalidArgumentError(
        "NCCL communicator: a world of more than one rank needs a rendezvous store");
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("NCCL communicator: the timeout must be positive");
  }
  SetCudaCheckRank(options.rank);
  CUDA_CHECK(cudaSetDevice(options.device));
  ncclUniqueId id;
  absl::StatusOr<std::string> encoded = ReadUniqueId(options, store, &id);
  if (!encoded.ok()) return encoded.status();

  std::unique_ptr<NcclCommunicator> communicator(new NcclCommunicator(options));
  CUDA_CHECK(cudaStreamCreateWithFlags(&communicator->barrier_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&communicator->barrier_value_), sizeof(int32_t)));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a rank whose peer never arrives can abort
  const Clock::time_point deadline = Clock::now() + options.timeout;
  ncclComm_t comm = nullptr;
  ncclResult_t result =
      ncclCommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
  if (comm != nullptr) result = WaitWhileInProgress(comm, result, deadline);
  if (result != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    absl::Status status =
        NcclStatus(result, "ncclCommInitRankConfig", __FILE__, __LINE__, options.rank);
    return absl::Status(status.code(),
                        absl::StrCat("creating the NCCL communicator of ", options.world_size,
                                     " ranks: ", status.message()));
  }
  communicator->comm_ = comm;
  communicator->watchdog_ = std::thread([raw = communicator.get()] { raw->WatchdogLoop(); });
  int version = 0;
  ncclGetVersion(&version);
  spdlog::info("rank {}: NCCL {} communicator of {} ranks on cuda:{}", options.rank, version,
               options.world_size, options.device);
  return Checked(std::move(communicator));
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    stopping_ = true;
  }
  watchdog_wakeup_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  cudaSetDevice(options_.device);
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (comm_ != nullptr) {
      // Finalize flushes the collectives still queued; a peer that is gone makes it stall, so it
      // is bounded like any collective and the communicator aborted after that.
      ncclResult_t result = ncclCommFinalize(comm_);
      result = WaitWhileInProgress(comm_, result, Clock::now() + options_.timeout);
      if (result == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
  }
  if (barrier_stream_ != nullptr) {
    cudaStreamSynchronize(barrier_stream_);
    cudaStreamDestroy(barrier_stream_);
  }
  if (barrier_value_ != nullptr) cudaFree(barrier_value_);
  std::lock_guard<std::mutex> lock(pending_mutex_);
  for (const Pending& pending : pending_) {
    cudaEventSynchronize(pending.event);
    cudaEventDestroy(pending.event);
  }
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
}

absl::Status NcclCommunicator::CheckUsable(const char* operation) const {
  if (!failure_.ok()) {
    return absl::Status(failure_.code(), absl::StrCat(operation, ": ", failure_.message()));
  }
  if (comm_ == nullptr) {
    return absl::CancelledError(absl::StrCat(operation, ": the NCCL communicator was aborted"));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Complete(ncclResult_t result, const char* statement,
                                        const char* file, int line) {
  result = WaitWhileInProgress(comm_, result, Clock::now() + options_.timeout);
  if (result == ncclSuccess) return absl::OkStatus();
  return NcclStatus(result, statement, file, line, options_.rank);
}

absl::StatusOr<cudaEvent_t> NcclCommunicator::AcquireEvent() {
  {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    if (!free_events_.empty()) {
      cudaEvent_t event = free_events_.back();
      free_events_.pop_back();
      return event;
    }
  }
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

absl::Status NcclCommunicator::Track(cudaStream_t stream, std::string operation, int64_t bytes) {
  operations_.fetch_add(1, std::memory_order_relaxed);
  bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
  absl::StatusOr<cudaEvent_t> event = AcquireEvent();
  if (!event.ok()) return event.status();
  CUDA_CHECK(cudaEventRecord(*event, stream));
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.push_back(Pending{*event, Clock::now(), std::move(operation)});
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllGather(const Tensor& shard, const Tensor& full, Stream& stream) {
  absl::StatusOr<ncclDataType_t> type = NcclTypeOf(full.dtype);
  if (!type.ok()) return type.status();
  absl::StatusOr<cudaStream_t> cuda_stream = CudaStreamOf(stream);
  if (!cuda_stream.ok()) return cuda_stream.status();
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (absl::Status usable = CheckUsable("AllGather"); !usable.ok()) return usable;
    if (absl::Status status = NCCL_COMPLETE(ncclAllGather(
            shard.data, full.data, static_cast<size_t>(shard.numel()), *type, comm_, *cuda_stream));
        !status.ok()) {
      return status;
    }
  }
  return Track(*cuda_stream, absl::StrCat("all-gather of ", full.Describe()), shard.bytes());
}

absl::Status NcclCommunicator::ReduceScatter(const Tensor& full, const Tensor& shard, ReduceOp op,
                                             Stream& stream) {
  absl::StatusOr<ncclDataType_t> type = NcclTypeOf(full.dtype);
  if (!type.ok()) return type.status();
  absl::StatusOr<cudaStream_t> cuda_stream = CudaStreamOf(stream);
  if (!cuda_stream.ok()) return cuda_stream.status();
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (absl::Status usable = CheckUsable("ReduceScatter"); !usable.ok()) return usable;
    if (absl::Status status = NCCL_COMPLETE(
            ncclReduceScatter(full.data, shard.data, static_cast<size_t>(shard.numel()), *type,
                              NcclOpOf(op), comm_, *cuda_stream));
        !status.ok()) {
      return status;
    }
  }
  return Track(*cuda_stream, absl::StrCat("reduce-scatter of ", full.Describe()), full.bytes());
}

absl::Status NcclCommunicator::AllReduce(const Tensor& values, ReduceOp op, Stream& stream) {
  absl::StatusOr<ncclDataType_t> type = NcclTypeOf(values.dtype);
  if (!type.ok()) return type.status();
  absl::StatusOr<cudaStream_t> cuda_stream = CudaStreamOf(stream);
  if (!cuda_stream.ok()) return cuda_stream.status();
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (absl::Status usable = CheckUsable("AllReduce"); !usable.ok()) return usable;
    if (absl::Status status = NCCL_COMPLETE(
            ncclAllReduce(values.data, values.data, static_cast<size_t>(values.numel()), *type,
                          NcclOpOf(op), comm_, *cuda_stream));
        !status.ok()) {
      return status;
    }
  }
  return Track(*cuda_stream, absl::StrCat("all-reduce of ", values.Describe()), values.bytes());
}

absl::Status NcclCommunicator::Barrier() {
  const Clock::time_point start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (absl::Status usable = CheckUsable("Barrier"); !usable.ok()) return usable;
    CUDA_CHECK(cudaSetDevice(options_.device));
    CUDA_CHECK(cudaMemsetAsync(barrier_value_, 0, sizeof(int32_t), barrier_stream_));
    if (absl::Status status = NCCL_COMPLETE(ncclAllReduce(
            barrier_value_, barrier_value_, 1, ncclInt32, ncclSum, comm_, barrier_stream_));
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status tracked = Track(barrier_stream_, "barrier", sizeof(int32_t)); !tracked.ok()) {
    return tracked;
  }
  // Polled rather than synchronised, so that an abort by the watchdog ends the wait.
  while (true) {
    const cudaError_t state = cudaStreamQuery(barrier_stream_);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) {
      return CudaErrorStatus(state, "cudaStreamQuery(barrier)", __FILE__, __LINE__);
    }
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      return CheckUsable("Barrier");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  blocked_nanoseconds_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(),
      std::memory_order_relaxed);
  return absl::OkStatus();
}

void NcclCommunicator::AbortWith(absl::Status reason) {
  std::lock_guard<std::mutex> lock(comm_mutex_);
  if (failure_.ok()) failure_ = std::move(reason);
  aborted_.store(true);
  if (comm_ != nullptr) {
    // Ends the NCCL kernels still waiting on peers, so the streams drain and no rank hangs.
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

void NcclCommunicator::Abort() {
  AbortWith(absl::CancelledError("the NCCL communicator was aborted (the attempt is over)"));
}

void NcclCommunicator::WatchdogLoop() {
  cudaSetDevice(options_.device);
  SetCudaCheckRank(options_.rank);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(watchdog_mutex_);
      watchdog_wakeup_.wait_for(lock, options_.poll_interval, [this] { return stopping_; });
      if (stopping_) return;
    }
    if (aborted_.load()) continue;
    ncclResult_t async_result = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &async_result);
    }
    if (async_result != ncclSuccess && async_result != ncclInProgress) {
      absl::Status status =
          NcclStatus(async_result, "ncclCommGetAsyncError", __FILE__, __LINE__, options_.rank);
      spdlog::error("rank {}: NCCL reported an asynchronous error; aborting: {}", options_.rank,
                    std::string(status.message()));
      AbortWith(absl::AbortedError(absl::StrCat("NCCL failed: ", status.message())));
      continue;
    }
    // Retire completed collectives in order; the oldest outstanding one bounds the wait.
    std::string overdue;
    {
      std::lock_guard<std::mutex> lock(pending_mutex_);
      while (!pending_.empty()) {
        const cudaError_t state = cudaEventQuery(pending_.front().event);
        if (state == cudaErrorNotReady) break;
        free_events_.push_back(pending_.front().event);
        pending_.pop_front();
      }
      if (!pending_.empty() && Clock::now() - pending_.front().issued > options_.timeout) {
        overdue = pending_.front().operation;
      }
    }
    if (!overdue.empty()) {
      const std::string message = absl::StrCat(
          "rank ", options_.rank, ": NCCL ", overdue, " did not complete within ",
          options_.timeout.count(), " ms (a peer is dead or stuck); communicator aborted");
      spdlog::error("{}", message);
      AbortWith(absl::DeadlineExceededError(message));
    }
  }
}

CommunicatorStats NcclCommunicator::stats() const {
  CommunicatorStats stats;
  stats.blocked_seconds = blocked_nanoseconds_.load(std::memory_order_relaxed) * 1e-9;
  stats.operations = operations_.load(std::memory_order_relaxed);
  stats.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace fsdpd
