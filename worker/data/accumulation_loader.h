// The batch of one optimizer step with gradient accumulation (train.grad_accum_steps = K): the K
// micro-batches of batch_size rows each, one after the other. Micro-batch m of step s is the
// wrapped loader's batch s·K + m, so with one rank K micro-batches of b rows read the very rows
// one batch of K·b rows reads, and a step's data stays a pure function of its index (a resumed
// run continues from the checkpoint's step with the same rows).
#pragma once

#include <cstdint>
#include <memory>

#include "worker/data/data_loader.h"

namespace fsdpd {

// The wrapped loader's batches are rows_per_micro_batch × seq_len tokens each; a Batch of the
// result fills K of them, micro-batch m at offset m · rows_per_micro_batch · seq_len.
std::unique_ptr<DataLoader> AccumulationLoader(std::unique_ptr<DataLoader> micro_batches,
                                               int64_t grad_accum_steps,
                                               int64_t tokens_per_micro_batch);

}  // namespace fsdpd
