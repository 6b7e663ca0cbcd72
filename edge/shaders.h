// The compute shaders, compiled from edge/shaders/*.comp by glslc at build time and embedded
// as SPIR-V words (edge/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdpd::edge {

enum class Shader {
  kEmbedding,
  kEmbeddingF16,
  kElementwise,
  kRmsNorm,
  kRmsNormF16,
  kTokenNll,
  kAttention,
  kMatmul,
  kMatmulF16,
  kMatmulCoop,
};

struct SpirV {
  const uint32_t* words;
  size_t bytes;
};

SpirV ShaderCode(Shader shader);

// The output block one workgroup of a matmul shader computes (its dispatch grid is
// ⌈N / cols⌉ × ⌈M / rows⌉); {1, 1} for the other shaders.
struct OutputBlock {
  int64_t rows;
  int64_t cols;
};
OutputBlock MatmulOutputBlock(Shader shader);
const char* ShaderName(Shader shader);

}  // namespace fsdpd::edge
