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
constexpr uint32_t kAttentionCoop[] =
#include "edge/shaders/attention_coop.spv.inc"
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
constexpr uint32_t kMatmulCoopK64[] =
#include "edge/shaders/matmul_coop_k64.spv.inc"
    ;
constexpr uint32_t kMatmulCoop256x128[] =
#include "edge/shaders/matmul_coop_256x128.spv.inc"
    ;
constexpr uint32_t kMatmulCoop128x256[] =
#include "edge/shaders/matmul_coop_128x256.spv.inc"
    ;
constexpr uint32_t kMatmulCoopW4[] =
#include "edge/shaders/matmul_coop_w4.spv.inc"
    ;
constexpr uint32_t kMatmulCoopG8[] =
#include "edge/shaders/matmul_coop_g8.spv.inc"
    ;
constexpr uint32_t kMatmulCoop256x128G8[] =
#include "edge/shaders/matmul_coop_256x128_g8.spv.inc"
    ;
constexpr uint32_t kMatmulCoop128x256G8[] =
#include "edge/shaders/matmul_coop_128x256_g8.spv.inc"
    ;

#if EDGE_HAVE_CM2
constexpr uint32_t kMatmulCm2[] =
#include "edge/shaders/matmul_cm2.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256[] =
#include "edge/shaders/matmul_cm2_128x256.spv.inc"
    ;
constexpr uint32_t kMatmulCm2K64[] =
#include "edge/shaders/matmul_cm2_k64.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256K64[] =
#include "edge/shaders/matmul_cm2_128x256_k64.spv.inc"
    ;
constexpr uint32_t kMatmulCm2256x128[] =
#include "edge/shaders/matmul_cm2_256x128.spv.inc"
    ;
#endif

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
    case Shader::kAttentionCoop:
      return Code(kAttentionCoop);
    case Shader::kMatmul:
      return Code(kMatmul);
    case Shader::kMatmulF16:
      return Code(kMatmulF16);
    case Shader::kMatmulCoop:
      return Code(kMatmulCoop);
    case Shader::kMatmulCoopK64:
      return Code(kMatmulCoopK64);
    case Shader::kMatmulCoop256x128:
      return Code(kMatmulCoop256x128);
    case Shader::kMatmulCoop128x256:
      return Code(kMatmulCoop128x256);
    case Shader::kMatmulCoopW4:
      return Code(kMatmulCoopW4);
    case Shader::kMatmulCoopG8:
      return Code(kMatmulCoopG8);
    case Shader::kMatmulCoop256x128G8:
      return Code(kMatmulCoop256x128G8);
    case Shader::kMatmulCoop128x256G8:
      return Code(kMatmulCoop128x256G8);
#if EDGE_HAVE_CM2
    case Shader::kMatmulCm2:
      return Code(kMatmulCm2);
    case Shader::kMatmulCm2128x256:
      return Code(kMatmulCm2128x256);
    case Shader::kMatmulCm2K64:
      return Code(kMatmulCm2K64);
    case Shader::kMatmulCm2128x256K64:
      return Code(kMatmulCm2128x256K64);
    case Shader::kMatmulCm2256x128:
      return Code(kMatmulCm2256x128);
#else
    case Shader::kMatmulCm2:
    case Shader::kMatmulCm2128x256:
    case Shader::kMatmulCm2K64:
    case Shader::kMatmulCm2128x256K64:
    case Shader::kMatmulCm2256x128:
      return {nullptr, 0};
#endif
  }
  return Code(kMatmul);
}

OutputBlock MatmulOutputBlock(Shader shader) {
  switch (shader) {
    case Shader::kMatmul:
    case Shader::kMatmulF16:
      return {EDGE_MATMUL_BLOCK_M, EDGE_MATMUL_BLOCK_N};
    case Shader::kMatmulCoop:
      return {EDGE_MATMUL_COOP_M, EDGE_MATMUL_COOP_N};
    case Shader::kMatmulCoopK64:
      return {EDGE_MATMUL_COOP_K64_M, EDGE_MATMUL_COOP_K64_N};
    case Shader::kMatmulCoop256x128:
      return {EDGE_MATMUL_COOP_256X128_M, EDGE_MATMUL_COOP_256X128_N};
    case Shader::kMatmulCoop128x256:
      return {EDGE_MATMUL_COOP_128X256_M, EDGE_MATMUL_COOP_128X256_N};
    case Shader::kMatmulCoopW4:
      return {EDGE_MATMUL_COOP_W4_M, EDGE_MATMUL_COOP_W4_N};
    case Shader::kMatmulCoopG8:
      return {EDGE_MATMUL_COOP_G8_M, EDGE_MATMUL_COOP_G8_N};
    case Shader::kMatmulCoop256x128G8:
      return {EDGE_MATMUL_COOP_256X128_G8_M, EDGE_MATMUL_COOP_256X128_G8_N};
    case Shader::kMatmulCoop128x256G8:
      return {EDGE_MATMUL_COOP_128X256_G8_M, EDGE_MATMUL_COOP_128X256_G8_N};
#if EDGE_HAVE_CM2
    case Shader::kMatmulCm2:
      return {EDGE_MATMUL_CM2_M, EDGE_MATMUL_CM2_N};
    case Shader::kMatmulCm2128x256:
      return {EDGE_MATMUL_CM2_128X256_M, EDGE_MATMUL_CM2_128X256_N};
    case Shader::kMatmulCm2K64:
      return {EDGE_MATMUL_CM2_K64_M, EDGE_MATMUL_CM2_K64_N};
    case Shader::kMatmulCm2128x256K64:
      return {EDGE_MATMUL_CM2_128X256_K64_M, EDGE_MATMUL_CM2_128X256_K64_N};
    case Shader::kMatmulCm2256x128:
      return {EDGE_MATMUL_CM2_256X128_M, EDGE_MATMUL_CM2_256X128_N};
#endif
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
    case Shader::kAttentionCoop:
      return "attention (cooperative matrix)";
    case Shader::kMatmul:
      return "matmul";
    case Shader::kMatmulF16:
      return "matmul (fp16)";
    case Shader::kMatmulCoop:
      return "matmul (cooperative matrix)";
    case Shader::kMatmulCoopK64:
      return "matmul (cooperative matrix, K slice 64)";
    case Shader::kMatmulCoop256x128:
      return "matmul (cooperative matrix, 256x128 block)";
    case Shader::kMatmulCoop128x256:
      return "matmul (cooperative matrix, 128x256 block)";
    case Shader::kMatmulCoopW4:
      return "matmul (cooperative matrix, four subgroups)";
    case Shader::kMatmulCoopG8:
      return "matmul (cooperative matrix, grouped order)";
    case Shader::kMatmulCoop256x128G8:
      return "matmul (cooperative matrix, 256x128 block, grouped order)";
    case Shader::kMatmulCoop128x256G8:
      return "matmul (cooperative matrix, 128x256 block, grouped order)";
    case Shader::kMatmulCm2:
      return "matmul (workgroup-scope cooperative matrix)";
    case Shader::kMatmulCm2128x256:
      return "matmul (workgroup-scope cooperative matrix, 128x256 block)";
    case Shader::kMatmulCm2K64:
      return "matmul (workgroup-scope cooperative matrix, K slice 64)";
    case Shader::kMatmulCm2128x256K64:
      return "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64)";
    case Shader::kMatmulCm2256x128:
      return "matmul (workgroup-scope cooperative matrix, 256x128 block)";
  }
  return "?";
}

// The names follow edge_coop_variants in edge/CMakeLists.txt.
const std::vector<CoopMatmulVariant>& CoopMatmulVariants() {
  static const auto* variants = new std::vector<CoopMatmulVariant> {
    {Shader::kMatmulCoop, "128x128k32"}, {Shader::kMatmulCoopK64, "128x128k64"},
        {Shader::kMatmulCoop256x128, "256x128k32"}, {Shader::kMatmulCoop128x256, "128x256k32"},
        {Shader::kMatmulCoopW4, "128x128k32w4"}, {Shader::kMatmulCoopG8, "128x128k32g8"},
        {Shader::kMatmulCoop256x128G8, "256x128k32g8"},
        {Shader::kMatmulCoop128x256G8, "128x256k32g8"},
#if EDGE_HAVE_CM2
        {Shader::kMatmulCm2, "128x128k32cm2", true},
        {Shader::kMatmulCm2128x256, "128x256k32cm2", true},
        {Shader::kMatmulCm2K64, "128x128k64cm2", true},
        {Shader::kMatmulCm2128x256K64, "128x256k64cm2", true},
        {Shader::kMatmulCm2256x128, "256x128k32cm2", true},
#endif
  };
  return *variants;
}

}  // namespace fsdpd::edge
