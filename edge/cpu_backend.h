// The reference backend: fp32 on the host through the training engine's CPU kernels
// (kernels/cpu), so `--backend cpu` computes exactly what the CPU engine computes.
#pragma once

#include <cstdint>
#include <memory>

#include "edge/backend.h"

namespace fsdpd::edge {

// Its buffers may hold memory_bytes together (0: the machine's physical memory); an allocation
// past that is a RESOURCE_EXHAUSTED error naming the sizes. With int8_activations, each product
// with int8 weights first quantizes its x per group of 32 (QuantizeActivationsInPlace in
// edge/quantize.h): what an int8 dot-product matvec would compute, measured before one exists.
std::unique_ptr<Backend> CreateCpuBackend(int64_t memory_bytes = 0, bool int8_activations = false);

}  // namespace fsdpd::edge
