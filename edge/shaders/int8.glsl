// int8 weights (Backend::Int8Weight, edge/quantize.h), read by the -DWEIGHTS_INT8 matmuls and by
// matvec_int8.comp. One buffer (binding 1) holds an [N, K] weight as
//   N·K int8 values, row-major, 4 to a uint (the lowest byte first), padded to 16 bytes; then
//   N·⌈K / GROUP⌉ fp16 scales, row-major, 2 to a uint (the lower half first).
// A weight is q · scale in fp32, exact (7 bits times 11), the value the CPU backend multiplies
// by. Everything is read through uint views: no 8- or 16-bit storage feature is needed.
//
// The bias (binding 2) and matvec_int8.comp's norm weight are ordinary weights, fp16 or fp32 as
// the device's precision stores them: read as uint words too, their type in the push constants'
// flags (FLAG_BIAS_HALF; kFlagBiasHalf in edge/vulkan_backend.cc). The backend pads
// fp16 buffers to whole words for such reads.
#define GROUP 32  // kInt8Group in edge/quantize.h
#define FLAG_BIAS 1u
#define FLAG_ADD 2u
#define FLAG_BIAS_HALF 4u
#define FLAG_NORM 8u
#define FLAG_SILU 16u
layout(std430, binding = 1) readonly buffer WQ { uint wq[]; };
layout(std430, binding = 1) readonly buffer WQ2 { uvec2 wq2[]; };
layout(std430, binding = 1) readonly buffer WQ4 { uvec4 wq4[]; };
layout(std430, binding = 2) readonly buffer BiasWords { uint bias_words[]; };

// The first uint of the scales: after N·K bytes rounded up to 16.
uint ScaleBase(uint n, uint k) { return ((n * k + 15u) / 16u) * 4u; }
// Scale number `index` (row · ⌈K / GROUP⌉ + group) of the scales at `base`.
float ScaleAt(uint base, uint index) {
  const vec2 pair = unpackHalf2x16(wq[base + index / 2u]);
  return (index & 1u) != 0u ? pair.y : pair.x;
}
// The four signed bytes of a word, the lowest first. Each byte, made q + 128 by flipping its
// sign bit, becomes the low mantissa bits of 2^23 (a float of value 2^23 + q + 128), and one
// subtraction gives q exactly: no int-to-float conversion, which NVIDIA's SMs issue at a quarter
// of the rate of an add, and which decoding's int8 matvec issued once a weight.
vec4 Bytes4(uint word) {
  const uvec4 biased = (uvec4(word ^ 0x80808080u) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu;
  return uintBitsToFloat(biased | 0x4B000000u) - 8388736.0;  // 2^23 + 128
}
// The int8 value at element `index` (row · K + column).
float ByteAt(uint index) {
  return float(bitfieldExtract(int(wq[index / 4u]), int(8u * (index % 4u)), 8));
}
float BiasAt(uint column, uint flags) {
  if ((flags & FLAG_BIAS) == 0u) return 0.0;
  if ((flags & FLAG_BIAS_HALF) == 0u) return uintBitsToFloat(bias_words[column]);
  const vec2 pair = unpackHalf2x16(bias_words[column / 2u]);
  return (column & 1u) != 0u ? pair.y : pair.x;
}
