#include "worker/comm/checked_communicator.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/backend/op_arguments.h"

namespace fsdpd {
namespace {

// No negative dimension, and data unless the tensor is empty (an empty shard may have none).
absl::Status Present(const OpArguments& check, const Tensor& t, const char* name) {
  for (int64_t d : t.shape) {
    if (d < 0) return check.Error(absl::StrCat(name, " has a negative dimension: ", t.Describe()));
  }
  if (t.data == nullptr && t.numel() > 0) {
    return check.Error(absl::StrCat(name, " has no data (", t.Describe(), ")"));
  }
  return absl::OkStatus();
}

// shard.numel() · world size = full.numel().
absl::Status FitsTheWorld(const OpArguments& check, const Tensor& shard, const Tensor& full,
                          int world_size) {
  if (shard.numel() * world_size == full.numel()) return absl::OkStatus();
  return check.Error(absl::StrCat("full ", full.Describe(), " must hold world size ", world_size,
                                  " × shard ", shard.Describe(), " = ", shard.numel() * world_size,
                                  " elements"));
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

std::unique_ptr<Communicator> Checked(std::unique_ptr<Communicator> inner) {
  return std::make_unique<CheckedCommunicator>(std::move(inner));
}

absl::Status CheckedCommunicator::AllGather(const Tensor& shard, const Tensor& full,
                                            Stream& stream) {
  const OpArguments check("AllGather");
  FSDPD_RETURN_IF_ERROR(Present(check, shard, "shard"));
  FSDPD_RETURN_IF_ERROR(Present(check, full, "full"));
  if (shard.dtype != full.dtype) {
    return check.Error(absl::StrCat("shard ", shard.Describe(), " and full ", full.Describe(),
                                    " must have the same dtype"));
  }
  FSDPD_RETURN_IF_ERROR(FitsTheWorld(check, shard, full, world_size()));
  // In place only when the shard is exactly this rank's slice of full.
  const char* own_slice = static_cast<const char*>(full.data) + shard.bytes() * rank();
  if (shard.data != own_slice && Overlaps(shard, full)) {
    return check.Error(absl::StrCat("shard ", shard.Describe(), " overlaps full ", full.Describe(),
                                    " but is not rank ", rank(),
                                    "'s slice of it; it must be exactly that slice (in place) or "
                                    "not share memory with full"));
  }
  return inner_->AllGather(shard, full, stream);
}

absl::Status CheckedCommunicator::ReduceScatter(const Tensor& full, const Tensor& shard,
                                                ReduceOp op, Stream& stream) {
  const OpArguments check("ReduceScatter");
  FSDPD_RETURN_IF_ERROR(Present(check, full, "full"));
  FSDPD_RETURN_IF_ERROR(Present(check, shard, "shard"));
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&full, "full"},
                                std::pair<const Tensor*, const char*>{&shard, "shard"}}) {
    if (t->dtype != DType::kF32) {
      return check.Error(absl::StrCat(name,
                                      " must be f32 (gradients are reduced in fp32, "
                                      "parallel.reduce_dtype), got ",
                                      t->Describe()));
    }
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    return check.Error(absl::StrCat("reduces by sum or average only, not ", ReduceOpName(op)));
  }
  FSDPD_RETURN_IF_ERROR(FitsTheWorld(check, shard, full, world_size()));
  if (Overlaps(shard, full)) {
    return check.Error(absl::StrCat("shard ", shard.Describe(), " overlaps full ", full.Describe(),
                                    "; full is left unchanged, so the shard must not share "
                                    "memory with it"));
  }
  return inner_->ReduceScatter(full, shard, op, stream);
}

absl::Status CheckedCommunicator::AllReduce(const Tensor& values, ReduceOp op, Stream& stream) {
  const OpArguments check("AllReduce");
  FSDPD_RETURN_IF_ERROR(Present(check, values, "values"));
  if (values.dtype != DType::kF32 && values.dtype != DType::kI32) {
    return check.Error(absl::StrCat("values must be f32 or i32, got ", values.Describe()));
  }
  if (op == ReduceOp::kAverage && values.dtype != DType::kF32) {
    return check.Error(absl::StrCat("an average needs f32 values, got ", values.Describe(),
                                    " (sum them and divide instead)"));
  }
  return inner_->AllReduce(values, op, stream);
}

}  // namespace fsdpd
