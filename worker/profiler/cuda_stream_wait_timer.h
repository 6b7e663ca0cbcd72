// StreamWaitTimer over CUDA events (CUDA builds only): a pair of timing events recorded on the
// waiting stream around each wait; their elapsed time is the stall. Pairs are read with
// cudaEventQuery once complete, so measuring never adds a host sync inside a step.
#pragma once

#include <memory>

#include "worker/profiler/profiling_backend.h"

namespace fsdpd {

// Null when `backend` is not the CUDA backend (its streams are not CUDA streams).
std::unique_ptr<StreamWaitTimer> CreateCudaStreamWaitTimer(Backend& backend);

}  // namespace fsdpd
