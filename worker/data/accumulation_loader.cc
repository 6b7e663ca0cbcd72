#include "worker/data/accumulation_loader.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace fsdpd {
namespace {

class Accumulation : public DataLoader {
 public:
  Accumulation(std::unique_ptr<DataLoader> inner, int64_t count, int64_t tokens)
      : inner_(std::move(inner)), count_(count), tokens_(tokens) {}

  absl::Status Batch(int64_t step, int32_t* inputs, int32_t* targets) override {
    if (step < 0 || step > std::numeric_limits<int64_t>::max() / count_) {
      return absl::InvalidArgumentError(
          absl::StrCat("data step ", step, " is out of range for ", count_, " micro-batches"));
    }
    for (int64_t micro = 0; micro < count_; ++micro) {
      const int64_t offset = micro * tokens_;
      if (absl::Status status =
              inner_->Batch(step * count_ + micro, inputs + offset, targets + offset);
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

  int64_t num_tokens() const override { return inner_->num_tokens(); }

 private:
  std::unique_ptr<DataLoader> inner_;
  int64_t count_;
  int64_t tokens_;
};

}  // namespace

std::unique_ptr<DataLoader> AccumulationLoader(std::unique_ptr<DataLoader> micro_batches,
                                               int64_t grad_accum_steps,
                                               int64_t tokens_per_micro_batch) {
  if (grad_accum_steps <= 1) return micro_batches;
  return std::make_unique<Accumulation>(std::move(micro_batches), grad_accum_steps,
                                        tokens_per_micro_batch);
}

}  // namespace fsdpd
