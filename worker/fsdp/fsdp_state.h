// Fully sharded data parallelism over the model's units (docs/architecture.md).
// Each unit has one flat fp32 master buffer padded to a multiple of the world size; this rank
// owns a contiguous slice of it together with the slice's gradient and AdamW moments. For
// compute a unit is all-gathered into an unsharded buffer of the parameter dtype whose views
// at UnitLayout's offsets are the parameters, then freed again. Gathers and reduce-scatters run
// on the backend's comm stream and are ordered against the compute stream with events only, so
// on a GPU the gather of unit i+1 overlaps the compute of unit i; on the CPU backend streams
// run inline but the issue order, events and buffer lifetimes are the same.
#pragma once

#include <limits>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/comm/communicator.h"
#include "worker/fsdp/flat_shard_layout.h"
#include "worker/model/minillm.h"
#include "worker/model/model_config.h"
#include "worker/profiler/profile_recorder.h"

namespace fsdpd {

struct FsdpOptions {
  bool reshard_after_forward = true;
  // Storage dtype of the unsharded parameters. kF32 with round_params_to_bf16 emulates bf16
  // parameters on an fp32 backend: values rounded through bf16, kept in fp32 storage.
  DType param_storage_dtype = DType::kF32;
  bool round_params_to_bf16 = false;
  // Gradient shards exist only while a unit's gradient is in flight in backward: each is
  // allocated for its unit's reduce-scatter and freed once a GradientShardConsumer (the
  // optimizer in backward) has queued its work on it, so the whole-model fp32 gradient shard
  // never exists. ForwardBackward then needs a consumer. With one rank the reduce-scatter is
  // the identity, so the unit's unsharded gradient buffer itself becomes the shard (no copy).
  bool transient_grad_shards = false;
  // With a consumer (the optimizer in backward): queue its work on the comm stream instead of
  // the compute stream, meant to run each unit's memory-bound AdamW beside the next units'
  // compute-bound backward (on the H200 it does not yet: see OptimizerOnCommStream in
  // worker/trainer_support.h). The comm stream waits for the unit's reduced gradient, the next
  // gather of the unit comes after the update on the same stream, and the gradient shard's
  // buffer is retired until compute is ordered after it (the results are bit-identical).
  bool optimizer_on_comm_stream = false;
  // How many units ahead of compute the gathers are issued, in forward and in backward. 1: the
  // next unit's gather overlaps this unit's compute; 2: each gather has a whole unit's compute
  // of slack before it is needed, for one more unsharded parameter buffer alive.
  int prefetch_units = 1;
  // Keep each fp32 master shard as two 16-bit halves (kernels/split_master.h) whose high half is
  // the bf16 parameters: a gather then moves them without a cast, and with one rank the unit's
  // parameters are the master's high half itself (no gather buffer, no copy). The fp32 values
  // are unchanged (checkpoints and exports hold them whole); the bf16 parameters differ from a
  // round-to-nearest-even cast only on exact ties (one value in 131,072, docs/architecture.md).
  // Needs param_storage_dtype kBF16.
  bool split_master = false;
  // Told which unit and phase (forward, backward, comm) the work belongs to; null: not profiled.
  ProfileRecorder* profiler = nullptr;
};

// This rank's slice of one unit and everything the optimizer keeps for it (fp32). With
// transient gradient shards, `grad` is null outside its unit's moment in backward. With
// FsdpOptions::split_master, `master` holds the fp32 values' high halves (bf16) and
// `master_low` their low halves; otherwise `master` is fp32 and `master_low` null.
struct UnitShard {
  FlatShardLayout layout;
  std::unique_ptr<Buffer> master;
  std::unique_ptr<Buffer> master_low;
  std::unique_ptr<Buffer> grad;
  std::unique_ptr<Buffer> exp_avg;
  std::unique_ptr<Buffer> exp_avg_sq;

  bool split_master() const { return master_low != nullptr; }
  // The fp32 master; only without split_master.
  Tensor Master() const { return master->View(DType::kF32, {layout.shard_numel}); }
  // The halves (the low ones typed bf16 for their size); only with split_master.
  Tensor MasterHigh() const { return master->View(DType::kBF16, {layout.shard_numel}); }
  Tensor MasterLow() const { return master_low->View(DType::kBF16, {layout.shard_numel}); }
  Tensor Grad() const { return grad->View(DType::kF32, {layout.shard_numel}); }
  Tensor ExpAvg() const { return exp_avg->View(DType::kF32, {layout.shard_numel}); }
  Tensor ExpAvgSq() const { return exp_avg_sq->View(DType::kF32, {layout.shard_numel}); }
};

// Takes each unit's reduced gradient shard as soon as it exists, during backward (the optimizer
// in backward). Called on the host once per unit per step, with `stream` (the compute or the
// comm stream, FsdpOptions::optimizer_on_comm_stream) already ordered after that unit's
// reduce-scatter: work queued on `stream` may read shard.grad and update the shard. With
// transient gradient shards FsdpState frees or retires the gradient buffer after the call.
class GradientShardConsumer {
 public:
  virtual ~GradientShardConsumer() = default;
  virtual absl::Status ConsumeGradientShard(int unit, UnitShard& shard, Stream& stream) = 0;
};

// Which of a step's micro-batches a ForwardBackward runs (train.grad_accum_steps). Every
// micro-batch's gradient is summed in fp32 into unsharded gradient buffers that FsdpState keeps
// from the first micro-batch to the last; only the last one reduce-scatters them, one unit at a
// time as its backward ends, so that a unit's reduce-scatter overlaps the backward of the units
// below it exactly as with one micro-batch. Each micro-batch's loss gradient is scaled by
// 1 / count, so the sum is the gradient of the mean loss over all of them.
struct MicroBatch {
  int64_t index = 0;  // 0-based, below count
  int64_t count = 1;
  bool first() const { return index == 0; }
  bool last() const { return index + 1 == count; }
};

class FsdpState {
 public:
  // Allocates every unit's shard buffers (zeroed) on the backend.
  static absl::StatusOr<std::unique_ptr<FsdpState>> Create(const std::vector<UnitLayout>& units,
                                                           Backend* backend,
                                                           Communicator* communicator,
                                                           const FsdpOptions& options);

  int num_units() const { return static_cast<int>(shards_.size()); }
  const UnitLayout& unit(int index) const { return units_[index]; }
  UnitShard& shard(int index) { return shards_[index]; }

  // One forward and backward of `model` on this rank's batch. Returns this rank's mean loss;
  // afterwards every unit's grad shard holds the gradient averaged over ranks, so the
  // optimizer sees the gradient of the global batch's mean loss. With a consumer, each unit's
  // averaged gradient shard is handed to it during backward instead, one unit behind the
  // reduce-scatters so that a reduce-scatter still overlaps the next unit's backward (at most
  // two gradient shards in flight). Required with transient_grad_shards.
  // With micro.count > 1 the gradients of micro-batches before the last are only accumulated
  // (no collective, no consumer: `consumer` is used on the last one alone), and the shards hold
  // the averaged gradient of all of them once the last returns.
  absl::StatusOr<float> ForwardBackward(MiniLLM& model, const int32_t* tokens,
                                        const int32_t* targets,
                                        GradientShardConsumer* consumer = nullptr,
                                        const MicroBatch& micro = {});

  // Forward only, for validation: this rank's mean loss of `model` on the batch, with no
  // gradient kept and nothing updated. The fused head also writes its gradient, into a scratch
  // buffer of the root's size that is freed before this returns (between steps, where the root's
  // gradient buffer does not exist). Reads the loss back, so it waits for the device.
  absl::StatusOr<float> EvaluateLoss(MiniLLM& model, const int32_t* tokens, const int32_t* targets);

  bool transient_grad_shards() const { return options_.transient_grad_shards; }

  // Issues the root unit's gather for the next step's forward, ordered after the updates queued
  // so far: called once a step's optimizer work is queued, so that the next step starts on
  // gathered parameters instead of waiting for the root's cast. A later LoadMasterFromHost of the
  // root drops it.
  absl::Status PrefetchRootForNextStep() { return IssueGather(num_units() - 1); }

  // Collective: every rank must call it. Leaves the whole unpadded fp32 master of `unit` in
  // `values` on every rank.
  absl::Status GatherMasterToHost(int unit, std::vector<float>* values);

  // Copies unpadded values of a whole unit (host) into this rank's master slice; padding stays
  // zero, and a gather of the unit already issued is dropped. Not collective.
  absl::Status LoadMasterFromHost(int unit, const std::vector<float>& values);

  // This rank's master slice (shard_numel values, padding included) to or from fp32 values on
  // the host, whatever its layout, in the compute stream's order (for checkpoints). Not
  // collective; loading drops a gather of the unit already issued.
  absl::Status CopyMasterShardToHost(int unit, float* values);
  absl::Status CopyMasterShardFromHost(int unit, const float* values);

 private:
  struct Unsharded {
    // The gathered parameters (data null: not gathered), in `params` or, with one rank and a
    // split master, the master's high half itself.
    Tensor view;
    std::unique_ptr<Buffer> params;
    std::unique_ptr<Event> params_ready;
    int64_t ready_sequence = 0;  // which gather params_ready marks on the comm stream
    std::unique_ptr<Buffer> grads;
    std::unique_ptr<Event> grads_reduced;  // the end of this unit's reduce-scatter
    int64_t reduce_sequence = 0;           // which reduce-scatter grads_reduced marks
  };
  // A gradient buffer the comm stream may still be reading (its reduce-scatter, or the
  // optimizer on the comm stream). The allocator is not stream-aware, so it is freed only once
  // the compute stream has waited for a gather issued after that work.
  static constexpr int64_t kReadByOptimizer = std::numeric_limits<int64_t>::max();
  struct RetiredGrads {
    int64_t issued_before_sequence = 0;
    int64_t reduce_sequence = 0;  // which reduce-scatter read it; kReadByOptimizer: see above
    std::unique_ptr<Buffer> buffer;
  };

  FsdpState(std::vector<UnitLayout> units, Backend* backend, Communicator* communicator,
            const FsdpOptions& options)
      : units_(std::move(units)),
        backend_(backend),
        communicator_(communicator),
        options_(options) {}

  absl::Status IssueGather(int unit);
  // Drops a gather of the unit already issued, once compute is ordered after it.
  absl::Status DropGather(int unit);
  // Makes the compute stream wait for the gather (issuing it first if needed).
  absl::Status AwaitParams(int unit);
  void ReleaseParams(int unit);
  // What of a fresh unsharded gradient buffer is zeroed: all of it for a unit the model
  // accumulates into, only FSDP's padding for one whose gradients the model writes whole.
  enum class GradientFill { kWhole, kPaddingOnly };
  absl::Status AllocateGrads(int unit, GradientFill fill);
  // After a block's backward wrote its micro-batch's gradient into the unit's unsharded
  // buffer: the first micro-batch's buffer becomes the accumulator, a later one is added to it
  // (fp32, on the compute stream) and freed; on the last, the accumulator is the unit's
  // gradient again, for its reduce-scatter.
  absl::Status AccumulateBlockGrads(int unit, const MicroBatch& micro);
  // Reduce-scatters the unit's unsharded gradient into its grad shard on the comm stream.
  absl::Status ReduceScatterGrads(int unit);
  // Orders the compute stream after the unit's reduce-scatter and hands the shard over.
  absl::Status ConsumeGrads(int unit, GradientShardConsumer& consumer);
  Tensor Params(int unit) const;
  Tensor Grads(int unit) const;

  std::vector<UnitLayout> units_;
  Backend* backend_;
  Communicator* communicator_;
  FsdpOptions options_;
  std::vector<UnitShard> shards_;
  std::vector<Unsharded> unsharded_;
  // Orders each gather after the compute already queued, so a buffer that compute freed is
  // never overwritten by the comm stream while a kernel still reads it.
  std::unique_ptr<Event> compute_progress_;
  int64_t gather_sequence_ = 0;
  int64_t reduce_sequence_ = 0;
  std::vector<RetiredGrads> retired_grads_;
  // Per unit, the sum of its blocks' gradients over the micro-batches run so far this step
  // (null outside accumulation, and for the root, which accumulates in its own buffer).
  std::vector<std::unique_ptr<Buffer>> accumulated_grads_;
};

}  // namespace fsdpd
