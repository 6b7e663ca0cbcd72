// The two FP8 formats of the FP8 linear layers, shared by the CUDA casts (kernels/cuda/fp8.h)
// and the CPU backend's emulation of them (kernels/cpu/fp8.h).
#pragma once

namespace fsdpd {

enum class Fp8Format {
  kE4M3,  // 4 exponent bits, 3 mantissa bits, largest finite 448: weights and activations
  kE5M2,  // 5 exponent bits, 2 mantissa bits, largest finite 57344: gradients
};

// The largest finite value of the format, the target of the amax under current scaling.
constexpr float Fp8Max(Fp8Format format) { return format == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

}  // namespace fsdpd
