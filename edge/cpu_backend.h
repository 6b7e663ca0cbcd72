// The reference backend: fp32 on the host through the training engine's CPU kernels
// (kernels/cpu), so `--backend cpu` computes exactly what the CPU engine computes.
#pragma once

#include <memory>

#include "edge/backend.h"

namespace fsdpd::edge {

std::unique_ptr<Backend> CreateCpuBackend();

}  // namespace fsdpd::edge
