// fp32 → IEEE fp16, the one conversion of the edge runtime's fp16 data: the weights the fp16
// path stores (VulkanBackend::Weight) and the bench's probe operands.
#pragma once

#include <cstdint>

namespace fsdpd::edge {

// Rounded to nearest even; overflow gives ±inf, NaN stays NaN, tiny values become subnormals
// or ±0.
uint16_t FloatToHalf(float value);

}  // namespace fsdpd::edge
