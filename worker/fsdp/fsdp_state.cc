#include "worker/fsdp/fsdp_state.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/run_on_threads.h"
#include "base/status_macros.h"
#include "kernels/split_master.h"

namespace fsdpd {

absl::StatusOr<std::unique_ptr<FsdpState>> FsdpState::Create(const std::vector<UnitLayout>& units,
                                                             Backend* backend,
                                                             Communicator* communicator,
                                                             const FsdpOptions& options) {
  if (options.split_master && options.param_storage_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        "FsdpOptions: a split master needs bf16 parameter storage (its high half is the "
        "parameters)");
  }
  std::unique_ptr<FsdpState> state(new FsdpState(units, backend, communicator, options));
  state->unsharded_.resize(units.size());
  state->accumulated_grads_.resize(units.size());
  Stream& stream = backend->compute_stream();
  for (const UnitLayout& unit : units) {
    UnitShard shard;
    shard.layout =
        ComputeFlatShardLayout(unit.numel, communicator->world_size(), communicator->rank());
    // Each buffer with the dtype it is zeroed in: fp32, or the master's two 16-bit halves.
    std::vector<std::pair<std::unique_ptr<Buffer>*, DType>> buffers = {
        {&shard.exp_avg, DType::kF32}, {&shard.exp_avg_sq, DType::kF32}};
    if (options.split_master) {
      buffers.push_back({&shard.master, DType::kBF16});
      buffers.push_back({&shard.master_low, DType::kBF16});
    } else {
      buffers.push_back({&shard.master, DType::kF32});
    }
    if (!options.transient_grad_shards) buffers.push_back({&shard.grad, DType::kF32});
    for (const auto& [buffer, dtype] : buffers) {
      absl::StatusOr<std::unique_ptr<Buffer>> allocated =
          backend->Allocate(shard.layout.shard_numel * DTypeSize(dtype));
      if (!allocated.ok()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("FSDP shard of unit ", unit.name, ": ", allocated.status().message()));
      }
      *buffer = std::move(*allocated);
      FSDPD_RETURN_IF_ERROR(
          backend->ops().Fill((*buffer)->View(dtype, {shard.layout.shard_numel}), 0.0f, stream));
    }
    state->shards_.push_back(std::move(shard));
  }
  return state;
}

Tensor FsdpState::Params(int unit) const {
  return Tensor{unsharded_[unit].view.data, options_.param_storage_dtype, {units_[unit].numel}};
}

Tensor FsdpState::Grads(int unit) const {
  return unsharded_[unit].grads->View(DType::kF32, {units_[unit].numel});
}

absl::Status FsdpState::IssueGather(int unit) {
  Unsharded& target = unsharded_[unit];
  if (target.view.data != nullptr) return absl::OkStatus();
  ProfileRange range(options_.profiler, units_[unit].name, kPhaseComm, "all-gather");
  const UnitShard& shard = shards_[unit];
  const FlatShardLayout& layout = shard.layout;
  const DType dtype = options_.param_storage_dtype;
  if (target.params_ready == nullptr) {
    FSDPD_ASSIGN_OR_RETURN(target.params_ready, backend_->CreateEvent());
  }
  if (compute_progress_ == nullptr) {
    FSDPD_ASSIGN_OR_RETURN(compute_progress_, backend_->CreateEvent());
  }
  // The new buffer may be memory that compute freed with kernels still queued on it, and the
  // master shard may be written by the optimizer on the compute stream: the gather waits for
  // both (an optimizer on the comm stream is already in the gather's order).
  Stream& comm = backend_->comm_stream();
  FSDPD_RETURN_IF_ERROR(compute_progress_->Record(backend_->compute_stream()));
  FSDPD_RETURN_IF_ERROR(compute_progress_->WaitOn(comm));
  if (shard.split_master() && layout.shard_numel == layout.padded_numel) {
    // One rank: the master's high half is the whole unit's parameters. The event still orders
    // compute after an optimizer queued on the comm stream.
    target.view = shard.MasterHigh();
  } else {
    FSDPD_ASSIGN_OR_RETURN(target.params,
                           backend_->Allocate(layout.padded_numel * DTypeSize(dtype)));
    target.view = target.params->View(dtype, {layout.padded_numel});
    if (shard.split_master()) {
      FSDPD_RETURN_IF_ERROR(communicator_->AllGather(shard.MasterHigh(), target.view, comm));
    } else {
      // The cast to the parameter dtype writes this rank's slice in place, so the all-gather
      // lands every slice straight in the buffer the kernels read: no copy-in or copy-out.
      const Tensor own_slice =
          target.params->View(dtype, {layout.shard_numel}, layout.shard_offset * DTypeSize(dtype));
      FSDPD_RETURN_IF_ERROR(backend_->ops().Cast(shard.Master(), own_slice, comm));
      if (options_.round_params_to_bf16) {
        FSDPD_RETURN_IF_ERROR(backend_->ops().RoundToBf16(own_slice, comm));
      }
      FSDPD_RETURN_IF_ERROR(communicator_->AllGather(own_slice, target.view, comm));
    }
  }
  target.ready_sequence = ++gather_sequence_;
  return target.params_ready->Record(comm);
}

absl::Status FsdpState::AwaitParams(int unit) {
  FSDPD_RETURN_IF_ERROR(IssueGather(unit));
  FSDPD_RETURN_IF_ERROR(unsharded_[unit].params_ready->WaitOn(backend_->compute_stream()));
  // Compute now runs after everything the comm stream had before this gather, including the
  // reduce-scatters of gradient buffers retired before it was issued.
  const int64_t waited = unsharded_[unit].ready_sequence;
  std::vector<RetiredGrads> still_in_use;
  for (RetiredGrads& retired : retired_grads_) {
    if (retired.issued_before_sequence >= waited) still_in_use.push_back(std::move(retired));
  }
  retired_grads_ = std::move(still_in_use);
  return absl::OkStatus();
}

void FsdpState::ReleaseParams(int unit) {
  // The backend's allocator is stream-ordered, so freeing here lets the next gather reuse the
  // memory only after the compute already queued on it.
  unsharded_[unit].params.reset();
  unsharded_[unit].view = Tensor{};
}

absl::Status FsdpState::DropGather(int unit) {
  if (unsharded_[unit].view.data == nullptr) return absl::OkStatus();
  // Gathered from the old master (PrefetchRootForNextStep): compute is ordered after that
  // gather before its buffer goes back to the allocator, and the next use gathers again.
  FSDPD_RETURN_IF_ERROR(unsharded_[unit].params_ready->WaitOn(backend_->compute_stream()));
  ReleaseParams(unit);
  return absl::OkStatus();
}

absl::Status FsdpState::AllocateGrads(int unit, GradientFill fill) {
  const FlatShardLayout& layout = shards_[unit].layout;
  FSDPD_ASSIGN_OR_RETURN(unsharded_[unit].grads,
                         backend_->Allocate(layout.padded_numel * DTypeSize(DType::kF32)));
  // The padding is zeroed either way: its reduce-scattered gradient must stay zero.
  const int64_t first = fill == GradientFill::kPaddingOnly ? layout.numel : 0;
  if (first == layout.padded_numel) return absl::OkStatus();
  return backend_->ops().Fill(
      unsharded_[unit].grads->View(DType::kF32, {layout.padded_numel - first},
                                   first * static_cast<int64_t>(DTypeSize(DType::kF32))),
      0.0f, backend_->compute_stream());
}

absl::Status FsdpState::AccumulateBlockGrads(int unit, const MicroBatch& micro) {
  if (micro.count == 1) return absl::OkStatus();
  std::unique_ptr<Buffer>& sum = accumulated_grads_[unit];
  Unsharded& target = unsharded_[unit];
  if (micro.first()) {
    sum = std::move(target.grads);
  } else {
    if (sum == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("FsdpState: micro-batch ", micro.index, " of unit ", units_[unit].name,
                       " has no accumulated gradient (micro-batch 0 of the step did not run)"));
    }
    const Tensor total = sum->View(DType::kF32, {shards_[unit].layout.padded_numel});
    const Tensor addend = target.grads->View(DType::kF32, {shards_[unit].layout.padded_numel});
    FSDPD_RETURN_IF_ERROR(backend_->ops().Add(total, addend, total, backend_->compute_stream()));
    // Stream-ordered: the memory is reused only after the add queued on it.
    target.grads.reset();
  }
  if (micro.last()) target.grads = std::move(sum);
  return absl::OkStatus();
}

absl::Status FsdpState::ReduceScatterGrads(int unit) {
  const FlatShardLayout& layout = shards_[unit].layout;
  UnitShard& shard = shards_[unit];
  Unsharded& target = unsharded_[unit];
  if (target.grads_reduced == nullptr) {
    FSDPD_ASSIGN_OR_RETURN(target.grads_reduced, backend_->CreateEvent());
  }
  if (communicator_->world_size() == 1 && shard.grad == nullptr &&
      layout.shard_numel == layout.padded_numel) {
    // One rank with transient shards: the average over one rank is the gradient itself, so the
    // unsharded buffer becomes the shard. No copy on the comm stream (it would compete with
    // compute for memory bandwidth), and no second buffer of the unit's size. The gradient is
    // ready once the compute stream's work queued so far is done.
    shard.grad = std::move(target.grads);
    target.reduce_sequence = reduce_sequence_;
    return target.grads_reduced->Record(backend_->compute_stream());
  }
  ProfileRange range(options_.profiler, units_[unit].name, kPhaseComm, "reduce-scatter");
  Stream& comm = backend_->comm_stream();
  FSDPD_ASSIGN_OR_RETURN(const std::unique_ptr<Event> computed, backend_->CreateEvent());
  FSDPD_RETURN_IF_ERROR(computed->Record(backend_->compute_stream()));
  FSDPD_RETURN_IF_ERROR(computed->WaitOn(comm));
  if (shard.grad == nullptr) {
    // Not zeroed: the reduce-scatter writes every element of the shard, padding included.
    absl::StatusOr<std::unique_ptr<Buffer>> buffer =
        backend_->Allocate(layout.shard_numel * DTypeSize(DType::kF32));
    if (!buffer.ok()) {
      return absl::Status(buffer.status().code(),
                          absl::StrCat("gradient shard of unit ", units_[unit].name, ": ",
                                       buffer.status().message()));
    }
    shard.grad = std::move(*buffer);
  }
  const Tensor full = unsharded_[unit].grads->View(DType::kF32, {layout.padded_numel});
  FSDPD_RETURN_IF_ERROR(communicator_->ReduceScatter(full, shard.Grad(), ReduceOp::kAverage, comm));
  retired_grads_.push_back(
      RetiredGrads{gather_sequence_, ++reduce_sequence_, std::move(target.grads)});
  target.reduce_sequence = reduce_sequence_;
  return target.grads_reduced->Record(comm);
}

absl::Status FsdpState::ConsumeGrads(int unit, GradientShardConsumer& consumer) {
  ProfileRange range(options_.profiler, units_[unit].name, kPhaseOptimizer);
  if (options_.optimizer_on_comm_stream) {
    // The comm stream runs the consumer after the reduce-scatter (already in its order) or, with
    // one rank, after the compute that wrote the gradient. Compute does not wait here at all.
    Stream& comm = backend_->comm_stream();
    FSDPD_RETURN_IF_ERROR(unsharded_[unit].grads_reduced->WaitOn(comm));
    FSDPD_RETURN_IF_ERROR(consumer.ConsumeGradientShard(unit, shards_[unit], comm));
    if (options_.transient_grad_shards) {
      // Read on the comm stream: kept until compute waits for a gather issued after it.
      retired_grads_.push_back(
          RetiredGrads{gather_sequence_, kReadByOptimizer, std::move(shards_[unit].grad)});
    }
    return absl::OkStatus();
  }
  FSDPD_RETURN_IF_ERROR(unsharded_[unit].grads_reduced->WaitOn(backend_->compute_stream()));
  // Compute now runs after this reduce-scatter and every one before it on the comm stream, so
  // the unsharded gradients they read may be reused: freed now rather than at the next gather.
  const int64_t reduced = unsharded_[unit].reduce_sequence;
  std::vector<RetiredGrads> still_in_use;
  for (RetiredGrads& retired : retired_grads_) {
    if (retired.reduce_sequence > reduced) still_in_use.push_back(std::move(retired));
  }
  retired_grads_ = std::move(still_in_use);
  FSDPD_RETURN_IF_ERROR(
      consumer.ConsumeGradientShard(unit, shards_[unit], backend_->compute_stream()));
  // The consumer's reads are queued on the compute stream, and every later user of this memory
  // is ordered after that stream (compute itself, a gather or a reduce-scatter waiting on it).
  if (options_.transient_grad_shards) shards_[unit].grad.reset();
  return absl::OkStatus();
}

absl::StatusOr<float> FsdpState::ForwardBackward(MiniLLM& model, const int32_t* tokens,
                                                 const int32_t* targets,
                                                 GradientShardConsumer* consumer,
                                                 const MicroBatch& micro) {
  if (micro.count < 1 || micro.index < 0 || micro.index >= micro.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("FsdpState::ForwardBackward: micro-batch ", micro.index, " of ", micro.count));
  }
  // Micro-batches before the last only accumulate: nothing is reduced or consumed.
  if (!micro.last()) consumer = nullptr;
  if (micro.last() && options_.transient_grad_shards && consumer == nullptr) {
    return absl::FailedPreconditionError(
        "FsdpState::ForwardBackward: transient gradient shards need a consumer in backward (the "
        "optimizer in backward); without one the gradients would be lost");
  }
  const int root = num_units() - 1;
  const int layers = root;
  ProfileRecorder* const profiler = options_.profiler;
  const std::string& root_name = units_[root].name;

  // Forward: the root stays gathered through forward, since the head needs it again at the end.
  {
    ProfileRange range(profiler, root_name, kPhaseForward);
    FSDPD_RETURN_IF_ERROR(model.BeginStep(tokens, targets));
    FSDPD_RETURN_IF_ERROR(AwaitParams(root));
    if (layers > 0) FSDPD_RETURN_IF_ERROR(IssueGather(0));
    FSDPD_RETURN_IF_ERROR(model.EmbedForward(Params(root)));
  }
  const int ahead = std::max(options_.prefetch_units, 1);
  for (int layer = 0; layer < layers; ++layer) {
    for (int next = layer + 1; next <= layer + ahead && next < layers; ++next) {
      FSDPD_RETURN_IF_ERROR(IssueGather(next));
    }
    ProfileRange range(profiler, units_[layer].name, kPhaseForward);
    FSDPD_RETURN_IF_ERROR(AwaitParams(layer));
    FSDPD_RETURN_IF_ERROR(model.BlockForward(layer, Params(layer)));
    // The last block is needed first in backward; freeing and regathering it would only cost.
    if (options_.reshard_after_forward && layer + 1 < layers) ReleaseParams(layer);
  }

  // The head's forward and backward are fused; reduce-scatter averages over the ranks, and the
  // loss scale averages over the micro-batches. The root's buffer is accumulated into by the
  // model (head, final norm, embedding), so it is zeroed once a step and kept through all of its
  // micro-batches. The profile counts the fused op in forward, where the loss is computed.
  {
    ProfileRange range(profiler, root_name, kPhaseForward, "head and loss");
    if (micro.first() || unsharded_[root].grads == nullptr) {
      if (!micro.first()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "FsdpState: micro-batch ", micro.index,
            " has no accumulated root gradient (micro-batch 0 of the step did not run)"));
      }
      FSDPD_RETURN_IF_ERROR(AllocateGrads(root, GradientFill::kWhole));
    }
    FSDPD_RETURN_IF_ERROR(model.HeadForwardBackward(Params(root), Grads(root),
                                                    1.0 / static_cast<double>(micro.count)));
    ReleaseParams(root);
  }

  // A consumer takes unit i's shard only once unit i-1's backward is queued: waiting for a
  // reduce-scatter right after issuing it would stall compute until it ends.
  int unconsumed = -1;
  for (int layer = layers - 1; layer >= 0; --layer) {
    for (int next = layer - 1; next >= layer - ahead && next >= 0; --next) {
      FSDPD_RETURN_IF_ERROR(IssueGather(next));
    }
    {
      ProfileRange range(profiler, units_[layer].name, kPhaseBackward);
      FSDPD_RETURN_IF_ERROR(AwaitParams(layer));
      // BlockBackward writes every parameter's gradient (worker/model/minillm.h).
      FSDPD_RETURN_IF_ERROR(AllocateGrads(layer, GradientFill::kPaddingOnly));
      FSDPD_RETURN_IF_ERROR(model.BlockBackward(layer, Params(layer), Grads(layer)));
      ReleaseParams(layer);
      FSDPD_RETURN_IF_ERROR(AccumulateBlockGrads(layer, micro));
    }
    if (!micro.last()) continue;
    FSDPD_RETURN_IF_ERROR(ReduceScatterGrads(layer));
    if (consumer != nullptr && unconsumed >= 0) {
      FSDPD_RETURN_IF_ERROR(ConsumeGrads(unconsumed, *consumer));
    }
    unconsumed = layer;
  }
  {
    ProfileRange range(profiler, root_name, kPhaseBackward);
    FSDPD_RETURN_IF_ERROR(model.EmbedBackward(Grads(root)));
  }
  // Between micro-batches the host reads the loss back (the next micro-batch's tokens are on the
  // host already); the root's gradient stays in its buffer for the next one.
  if (!micro.last()) return model.Loss();
  // The first block's shard goes before the root's (the largest) is allocated.
  if (consumer != nullptr && unconsumed >= 0) {
    FSDPD_RETURN_IF_ERROR(ConsumeGrads(unconsumed, *consumer));
  }
  FSDPD_RETURN_IF_ERROR(ReduceScatterGrads(root));
  if (consumer != nullptr) FSDPD_RETURN_IF_ERROR(ConsumeGrads(root, *consumer));

  // The optimizer (after backward, or for the norm after one in backward) reads on the compute
  // stream: it must see every reduced gradient and every update queued on the comm stream.
  FSDPD_ASSIGN_OR_RETURN(const std::unique_ptr<Event> reduced, backend_->CreateEvent());
  FSDPD_RETURN_IF_ERROR(reduced->Record(backend_->comm_stream()));
  FSDPD_RETURN_IF_ERROR(reduced->WaitOn(backend_->compute_stream()));
  retired_grads_.clear();
  // Read back only now that the whole step is queued: the host never waits mid-step.
  return model.Loss();
}

absl::StatusOr<float> FsdpState::EvaluateLoss(MiniLLM& model, const int32_t* tokens,
                                              const int32_t* targets) {
  const int root = num_units() - 1;
  const int layers = root;
  ProfileRange range(options_.profiler, "", kPhaseForward, "validation");
  FSDPD_RETURN_IF_ERROR(model.BeginStep(tokens, targets));
  FSDPD_RETURN_IF_ERROR(AwaitParams(root));
  if (layers > 0) FSDPD_RETURN_IF_ERROR(IssueGather(0));
  FSDPD_RETURN_IF_ERROR(model.EmbedForward(Params(root)));
  for (int layer = 0; layer < layers; ++layer) {
    if (layer + 1 < layers) FSDPD_RETURN_IF_ERROR(IssueGather(layer + 1));
    FSDPD_RETURN_IF_ERROR(AwaitParams(layer));
    FSDPD_RETURN_IF_ERROR(model.BlockForward(layer, Params(layer)));
    ReleaseParams(layer);
  }
  FSDPD_RETURN_IF_ERROR(AllocateGrads(root, GradientFill::kWhole));
  FSDPD_RETURN_IF_ERROR(model.HeadForwardBackward(Params(root), Grads(root), 1.0));
  ReleaseParams(root);
  // Stream-ordered: the memory is reused only after the head queued on it.
  unsharded_[root].grads.reset();
  return model.Loss();
}

absl::Status FsdpState::GatherMasterToHost(int unit, std::vector<float>* values) {
  const UnitShard& shard = shards_[unit];
  const FlatShardLayout& layout = shard.layout;
  std::vector<float> padded(static_cast<size_t>(layout.padded_numel));
  if (communicator_->world_size() == 1) {
    // The shard is the whole unit: read it where it is, with no device buffer (an export at the
    // end of a job would otherwise add one unit's fp32 size to the job's peak).
    FSDPD_RETURN_IF_ERROR(CopyMasterShardToHost(unit, padded.data()));
  } else {
    // One buffer of the unit's fp32 size either way: the halves gathered side by side.
    FSDPD_ASSIGN_OR_RETURN(const std::unique_ptr<Buffer> full,
                           backend_->Allocate(layout.padded_numel * DTypeSize(DType::kF32)));
    Stream& comm = backend_->comm_stream();
    if (shard.split_master()) {
      const int64_t half_bytes = layout.padded_numel * DTypeSize(DType::kBF16);
      const Tensor high = full->View(DType::kBF16, {layout.padded_numel});
      const Tensor low = full->View(DType::kBF16, {layout.padded_numel}, half_bytes);
      FSDPD_RETURN_IF_ERROR(communicator_->AllGather(shard.MasterHigh(), high, comm));
      FSDPD_RETURN_IF_ERROR(communicator_->AllGather(shard.MasterLow(), low, comm));
      std::vector<uint16_t> halves(2 * padded.size());
      FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(full->View(DType::kF32, {layout.padded_numel}),
                                                 halves.data(), comm));
      for (size_t i = 0; i < padded.size(); ++i) {
        padded[i] = JoinFloat(halves[i], halves[padded.size() + i]);
      }
    } else {
      const Tensor whole = full->View(DType::kF32, {layout.padded_numel});
      FSDPD_RETURN_IF_ERROR(communicator_->AllGather(shard.Master(), whole, comm));
      FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(whole, padded.data(), comm));
    }
  }
  padded.resize(static_cast<size_t>(layout.numel));
  *values = std::move(padded);
  return absl::OkStatus();
}

absl::Status FsdpState::LoadMasterFromHost(int unit, const std::vector<float>& values) {
  const FlatShardLayout& layout = shards_[unit].layout;
  if (static_cast<int64_t>(values.size()) != layout.numel) {
    return absl::InvalidArgumentError(absl::StrCat("unit ", units_[unit].name, " has ",
                                                   layout.numel, " parameters, got ", values.size(),
                                                   " values"));
  }
  // A shard without padding is read in place; one with padding is copied out, zero-filled.
  if (layout.valid_shard_numel == layout.shard_numel) {
    return CopyMasterShardFromHost(unit, values.data() + layout.shard_offset);
  }
  std::vector<float> slice(static_cast<size_t>(layout.shard_numel), 0.0f);
  std::copy(values.begin() + layout.shard_offset,
            values.begin() + layout.shard_offset + layout.valid_shard_numel, slice.begin());
  return CopyMasterShardFromHost(unit, slice.data());
}

absl::Status FsdpState::CopyMasterShardToHost(int unit, float* values) {
  const UnitShard& shard = shards_[unit];
  Stream& stream = backend_->compute_stream();
  if (!shard.split_master()) return backend_->CopyToHost(shard.Master(), values, stream);
  const size_t count = static_cast<size_t>(shard.layout.shard_numel);
  std::vector<uint16_t> high(count);
  std::vector<uint16_t> low(count);
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(shard.MasterHigh(), high.data(), stream));
  FSDPD_RETURN_IF_ERROR(backend_->CopyToHost(shard.MasterLow(), low.data(), stream));
  for (size_t i = 0; i < count; ++i) values[i] = JoinFloat(high[i], low[i]);
  return absl::OkStatus();
}

absl::Status FsdpState::CopyMasterShardFromHost(int unit, const float* values) {
  FSDPD_RETURN_IF_ERROR(DropGather(unit));
  const UnitShard& shard = shards_[unit];
  Stream& stream = backend_->compute_stream();
  if (!shard.split_master()) return backend_->CopyToDevice(values, shard.Master(), stream);
  const size_t count = static_cast<size_t>(shard.layout.shard_numel);
  std::vector<uint16_t> high(count);
  std::vector<uint16_t> low(count);
  // Split in slices on up to kThreads threads: a unit of a large model is hundreds of millions
  // of values, loaded at every start and restore.
  constexpr size_t kThreads = 8;
  constexpr size_t kMinSlice = size_t{1} << 22;
  const size_t threads = std::clamp<size_t>(
      std::min<size_t>(std::thread::hardware_concurrency(), count / kMinSlice), 1, kThreads);
  const size_t slice = (count + threads - 1) / threads;
  RunOnThreads(static_cast<int>((count + slice - 1) / slice), [&](int index) {
    const size_t begin = static_cast<size_t>(index) * slice;
    for (size_t i = begin; i < std::min(count, begin + slice); ++i) {
      const SplitHalves halves = SplitFloat(values[i]);
      high[i] = halves.high;
      low[i] = halves.low;
    }
  });
  FSDPD_RETURN_IF_ERROR(backend_->CopyToDevice(high.data(), shard.MasterHigh(), stream));
  return backend_->CopyToDevice(low.data(), shard.MasterLow(), stream);
}

}  // namespace fsdpd
