#include "edge/shaders.h"

namespace fsdpd::edge {
namespace {

// Each .inc is glslc's -mfmt=c output: a braced list of 32-bit words.
constexpr uint32_t kEmbedding[] =
#include "edge/shaders/embedding.spv.inc"
    ;
constexpr uint32_t kEmbeddingF16[] =
#include "edge/shaders/embedding_f16.spv.inc"
    ;
constexpr uint32_t kElementwise[] =
#include "edge/shaders/elementwise.spv.inc"
    ;
constexpr uint32_t kRmsNorm[] =
#include "edge/shaders/rmsnorm.spv.inc"
    ;
constexpr uint32_t kRmsNormF16[] =
#include "edge/shaders/rmsnorm_f16.spv.inc"
    ;
constexpr uint32_t kTokenNll[] =
#include "edge/shaders/token_nll.spv.inc"
    ;
constexpr uint32_t kAttention[] =
#include "edge/shaders/attention.spv.inc"
    ;
constexpr uint32_t kMatmul[] =
#include "edge/shaders/matmul.spv.inc"
    ;
constexpr uint32_t kMatmulF16[] =
#include "edge/shaders/matmul_f16.spv.inc"
    ;
constexpr uint32_t kMatmulCoop[] =
#include "edge/shaders/matmul_coop.spv.inc"
    ;

template <size_t N>
SpirV Code(const uint32_t (&words)[N]) {
  return {words, N * sizeof(uint32_t)};
}

}  // namespace

SpirV ShaderCode(Shader shader) {
  switch (shader) {
    case Shader::kEmbedding:
      return Code(kEmbedding);
    case Shader::kEmbeddingF16:
      return Code(kEmbeddingF16);
    case Shader::kElementwise:
      return Code(kElementwise);
    case Shader::kRmsNorm:
      return Code(kRmsNorm);
    case Shader::kRmsNormF16:
      return Code(kRmsNormF16);
    case Shader::kTokenNll:
      return Code(kTokenNll);
    case Shader::kAttention:
      return Code(kAttention);
    case Shader::kMatmul:
      return Code(kMatmul);
    case Shader::kMatmulF16:
      return Code(kMatmulF16);
    case Shader::kMatmulCoop:
      return Code(kMatmulCoop);
  }
  return Code(kMatmul);
}

OutputBlock MatmulOutputBlock(Shader shader) {
  switch (shader) {
    case Shader::kMatmul:
    case Shader::kMatmulF16:
      return {EDGE_MATMUL_BLOCK_M, EDGE_MATMUL_BLOCK_N};
    case Shader::kMatmulCoop:
      return {EDGE_COOP_BLOCK_M, EDGE_COOP_BLOCK_N};
    default:
      return {1, 1};
  }
}

const char* ShaderName(Shader shader) {
  switch (shader) {
    case Shader::kEmbedding:
      return "embedding";
    case Shader::kEmbeddingF16:
      return "embedding (fp16)";
    case Shader::kElementwise:
      return "elementwise";
    case Shader::kRmsNorm:
      return "rmsnorm";
    case Shader::kRmsNormF16:
      return "rmsnorm (fp16)";
    case Shader::kTokenNll:
      return "token_nll";
    case Shader::kAttention:
      return "attention";
    case Shader::kMatmul:
      return "matmul";
    case Shader::kMatmulF16:
      return "matmul (fp16)";
    case Shader::kMatmulCoop:
      return "matmul (cooperative matrix)";
  }
  return "?";
}

}  // namespace fsdpd::edge
