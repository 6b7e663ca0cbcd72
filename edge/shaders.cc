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
constexpr uint32_t kElementwiseHalfOut[] =
#include "edge/shaders/elementwise_h.spv.inc"
    ;
constexpr uint32_t kToHalf[] =
#include "edge/shaders/to_half.spv.inc"
    ;
constexpr uint32_t kRmsNorm[] =
#include "edge/shaders/rmsnorm.spv.inc"
    ;
constexpr uint32_t kRmsNormF16[] =
#include "edge/shaders/rmsnorm_f16.spv.inc"
    ;
constexpr uint32_t kRmsNormF16HalfOut[] =
#include "edge/shaders/rmsnorm_f16_h.spv.inc"
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
constexpr uint32_t kAttentionDecode[] =
#include "edge/shaders/attention_decode.spv.inc"
    ;
constexpr uint32_t kAttentionDecodeCombine[] =
#include "edge/shaders/attention_decode_combine.spv.inc"
    ;
constexpr uint32_t kMatmul[] =
#include "edge/shaders/matmul.spv.inc"
    ;
constexpr uint32_t kMatmulF16[] =
#include "edge/shaders/matmul_f16.spv.inc"
    ;
constexpr uint32_t kMatmulF16HalfX[] =
#include "edge/shaders/matmul_f16_h.spv.inc"
    ;
constexpr uint32_t kMatvec[] =
#include "edge/shaders/matvec.spv.inc"
    ;
constexpr uint32_t kMatvecF16[] =
#include "edge/shaders/matvec_f16.spv.inc"
    ;
constexpr uint32_t kMatvecF16HalfX[] =
#include "edge/shaders/matvec_f16_h.spv.inc"
    ;
constexpr uint32_t kMatvecWide[] =
#include "edge/shaders/matvec_wide.spv.inc"
    ;
constexpr uint32_t kMatvecF16Wide[] =
#include "edge/shaders/matvec_f16_wide.spv.inc"
    ;
constexpr uint32_t kMatvecF16HalfXWide[] =
#include "edge/shaders/matvec_f16_h_wide.spv.inc"
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
constexpr uint32_t kAttentionCm2[] =
#include "edge/shaders/attention_cm2.spv.inc"
    ;
constexpr uint32_t kAttentionCm2Br128[] =
#include "edge/shaders/attention_cm2_br128.spv.inc"
    ;
constexpr uint32_t kAttentionCm2Hd64[] =
#include "edge/shaders/attention_cm2_hd64.spv.inc"
    ;
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
constexpr uint32_t kMatmulCm2H[] =
#include "edge/shaders/matmul_cm2_h.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256H[] =
#include "edge/shaders/matmul_cm2_128x256_h.spv.inc"
    ;
constexpr uint32_t kMatmulCm2256x128H[] =
#include "edge/shaders/matmul_cm2_256x128_h.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256K64H[] =
#include "edge/shaders/matmul_cm2_128x256_k64_h.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256K64HU2[] =
#include "edge/shaders/matmul_cm2_128x256_k64_h_u2.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256K64HU8[] =
#include "edge/shaders/matmul_cm2_128x256_k64_h_u8.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256HU8[] =
#include "edge/shaders/matmul_cm2_128x256_h_u8.spv.inc"
    ;
constexpr uint32_t kMatmulCm2256x128K64H[] =
#include "edge/shaders/matmul_cm2_256x128_k64_h.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x256HS[] =
#include "edge/shaders/matmul_cm2_128x256_h_s.spv.inc"
    ;
constexpr uint32_t kMatmulCm2256x128HS[] =
#include "edge/shaders/matmul_cm2_256x128_h_s.spv.inc"
    ;
constexpr uint32_t kMatmulCm2128x128K64HS[] =
#include "edge/shaders/matmul_cm2_128x128_k64_h_s.spv.inc"
    ;
constexpr uint32_t kMatmulFeed128x128K64[] =
#include "edge/shaders/matmul_feed_128x128_k64.spv.inc"
    ;
constexpr uint32_t kMatmulNoFeed128x128K64[] =
#include "edge/shaders/matmul_nofeed_128x128_k64.spv.inc"
    ;
constexpr uint32_t kMatmulFeed128x256[] =
#include "edge/shaders/matmul_feed_128x256.spv.inc"
    ;
constexpr uint32_t kMatmulNoFeed128x256[] =
#include "edge/shaders/matmul_nofeed_128x256.spv.inc"
    ;
constexpr uint32_t kMmaPeakCm2[] =
#include "edge/shaders/mma_peak_cm2.spv.inc"
    ;
#endif

template <size_t N>
SpirV Code(const uint32_t (&words)[N]) {
  return {words, N * sizeof(uint32_t)};
}

// Everything known about a shader in one row: its code, its name for messages, a matmul's
// output block ({1, 1} for the others), and for the cooperative-matrix matmuls the block name
// VulkanOptions::coop_block takes (following edge_coop_variants and edge_cm2_variants in
// edge/CMakeLists.txt) and whether it uses workgroup-scope matrices. A shader this build could
// not compile has no row.
struct ShaderInfo {
  Shader shader;
  const char* name;
  SpirV code;
  OutputBlock block = {1, 1};
  const char* coop_block = nullptr;
  bool workgroup_scope = false;
  bool half_input = false;
};

const std::vector<ShaderInfo>& Shaders() {
  static const auto* shaders = new std::vector<ShaderInfo> {
    {Shader::kEmbedding, "embedding", Code(kEmbedding)},
        {Shader::kEmbeddingF16, "embedding (fp16)", Code(kEmbeddingF16)},
        {Shader::kElementwise, "elementwise", Code(kElementwise)},
        {Shader::kElementwiseHalfOut, "elementwise (fp16 out)", Code(kElementwiseHalfOut)},
        {Shader::kToHalf, "to_half", Code(kToHalf)}, {Shader::kRmsNorm, "rmsnorm", Code(kRmsNorm)},
        {Shader::kRmsNormF16, "rmsnorm (fp16)", Code(kRmsNormF16)},
        {Shader::kRmsNormF16HalfOut, "rmsnorm (fp16, fp16 out)", Code(kRmsNormF16HalfOut)},
        {Shader::kTokenNll, "token_nll", Code(kTokenNll)},
        {Shader::kAttention, "attention", Code(kAttention)},
        {Shader::kAttentionCoop, "attention (cooperative matrix)", Code(kAttentionCoop)},
        {Shader::kAttentionDecode, "attention (decoding)", Code(kAttentionDecode)},
        {Shader::kAttentionDecodeCombine, "attention (decoding, slices added)",
         Code(kAttentionDecodeCombine)},
        {Shader::kMatmul, "matmul", Code(kMatmul), {EDGE_MATMUL_BLOCK_M, EDGE_MATMUL_BLOCK_N}},
        {Shader::kMatmulF16,
         "matmul (fp16)",
         Code(kMatmulF16),
         {EDGE_MATMUL_BLOCK_M, EDGE_MATMUL_BLOCK_N}},
        {Shader::kMatmulF16HalfX,
         "matmul (fp16, fp16 x)",
         Code(kMatmulF16HalfX),
         {EDGE_MATMUL_BLOCK_M, EDGE_MATMUL_BLOCK_N}},
        {Shader::kMatvec, "matvec", Code(kMatvec)},
        {Shader::kMatvecF16, "matvec (fp16)", Code(kMatvecF16)},
        {Shader::kMatvecF16HalfX, "matvec (fp16, fp16 x)", Code(kMatvecF16HalfX)},
        {Shader::kMatvecWide, "matvec, wide", Code(kMatvecWide)},
        {Shader::kMatvecF16Wide, "matvec (fp16), wide", Code(kMatvecF16Wide)},
        {Shader::kMatvecF16HalfXWide, "matvec (fp16, fp16 x), wide", Code(kMatvecF16HalfXWide)},
        {Shader::kMatmulCoop,
         "matmul (cooperative matrix)",
         Code(kMatmulCoop),
         {EDGE_MATMUL_COOP_M, EDGE_MATMUL_COOP_N},
         "128x128k32"},
        {Shader::kMatmulCoopK64,
         "matmul (cooperative matrix, K slice 64)",
         Code(kMatmulCoopK64),
         {EDGE_MATMUL_COOP_K64_M, EDGE_MATMUL_COOP_K64_N},
         "128x128k64"},
        {Shader::kMatmulCoop256x128,
         "matmul (cooperative matrix, 256x128 block)",
         Code(kMatmulCoop256x128),
         {EDGE_MATMUL_COOP_256X128_M, EDGE_MATMUL_COOP_256X128_N},
         "256x128k32"},
        {Shader::kMatmulCoop128x256,
         "matmul (cooperative matrix, 128x256 block)",
         Code(kMatmulCoop128x256),
         {EDGE_MATMUL_COOP_128X256_M, EDGE_MATMUL_COOP_128X256_N},
         "128x256k32"},
        {Shader::kMatmulCoopW4,
         "matmul (cooperative matrix, four subgroups)",
         Code(kMatmulCoopW4),
         {EDGE_MATMUL_COOP_W4_M, EDGE_MATMUL_COOP_W4_N},
         "128x128k32w4"},
        {Shader::kMatmulCoopG8,
         "matmul (cooperative matrix, grouped order)",
         Code(kMatmulCoopG8),
         {EDGE_MATMUL_COOP_G8_M, EDGE_MATMUL_COOP_G8_N},
         "128x128k32g8"},
        {Shader::kMatmulCoop256x128G8,
         "matmul (cooperative matrix, 256x128 block, grouped order)",
         Code(kMatmulCoop256x128G8),
         {EDGE_MATMUL_COOP_256X128_G8_M, EDGE_MATMUL_COOP_256X128_G8_N},
         "256x128k32g8"},
        {Shader::kMatmulCoop128x256G8,
         "matmul (cooperative matrix, 128x256 block, grouped order)",
         Code(kMatmulCoop128x256G8),
         {EDGE_MATMUL_COOP_128X256_G8_M, EDGE_MATMUL_COOP_128X256_G8_N},
         "128x256k32g8"},
#if EDGE_HAVE_CM2
        {Shader::kAttentionCm2,
         "attention (workgroup-scope cooperative matrix)",
         Code(kAttentionCm2),
         {EDGE_ATTENTION_CM2_M, EDGE_ATTENTION_CM2_N}},
        {Shader::kAttentionCm2Br128,
         "attention (workgroup-scope cooperative matrix, 128 queries)",
         Code(kAttentionCm2Br128),
         {EDGE_ATTENTION_CM2_BR128_M, EDGE_ATTENTION_CM2_BR128_N}},
        {Shader::kAttentionCm2Hd64,
         "attention (workgroup-scope cooperative matrix, head_dim ≤ 64)",
         Code(kAttentionCm2Hd64),
         {EDGE_ATTENTION_CM2_HD64_M, EDGE_ATTENTION_CM2_HD64_N}},
        {Shader::kMatmulCm2, "matmul (workgroup-scope cooperative matrix)",
         Code(kMatmulCm2),   {EDGE_MATMUL_CM2_M, EDGE_MATMUL_CM2_N},
         "128x128k32cm2",    true},
        {Shader::kMatmulCm2128x256, "matmul (workgroup-scope cooperative matrix, 128x256 block)",
         Code(kMatmulCm2128x256),   {EDGE_MATMUL_CM2_128X256_M, EDGE_MATMUL_CM2_128X256_N},
         "128x256k32cm2",           true},
        {Shader::kMatmulCm2K64, "matmul (workgroup-scope cooperative matrix, K slice 64)",
         Code(kMatmulCm2K64),   {EDGE_MATMUL_CM2_K64_M, EDGE_MATMUL_CM2_K64_N},
         "128x128k64cm2",       true},
        {Shader::kMatmulCm2128x256K64,
         "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64)",
         Code(kMatmulCm2128x256K64),
         {EDGE_MATMUL_CM2_128X256_K64_M, EDGE_MATMUL_CM2_128X256_K64_N},
         "128x256k64cm2",
         true},
        {Shader::kMatmulCm2256x128, "matmul (workgroup-scope cooperative matrix, 256x128 block)",
         Code(kMatmulCm2256x128),   {EDGE_MATMUL_CM2_256X128_M, EDGE_MATMUL_CM2_256X128_N},
         "256x128k32cm2",           true},
        {Shader::kMatmulCm2H,
         "matmul (workgroup-scope cooperative matrix, fp16 x)",
         Code(kMatmulCm2H),
         {EDGE_MATMUL_CM2_H_M, EDGE_MATMUL_CM2_H_N},
         "128x128k32cm2h",
         true,
         true},
        {Shader::kMatmulCm2128x256H,
         "matmul (workgroup-scope cooperative matrix, 128x256 block, fp16 x)",
         Code(kMatmulCm2128x256H),
         {EDGE_MATMUL_CM2_128X256_H_M, EDGE_MATMUL_CM2_128X256_H_N},
         "128x256k32cm2h",
         true,
         true},
        {Shader::kMatmulCm2256x128H,
         "matmul (workgroup-scope cooperative matrix, 256x128 block, fp16 x)",
         Code(kMatmulCm2256x128H),
         {EDGE_MATMUL_CM2_256X128_H_M, EDGE_MATMUL_CM2_256X128_H_N},
         "256x128k32cm2h",
         true,
         true},
        {Shader::kMatmulCm2128x256K64H,
         "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64, fp16 x)",
         Code(kMatmulCm2128x256K64H),
         {EDGE_MATMUL_CM2_128X256_K64_H_M, EDGE_MATMUL_CM2_128X256_K64_H_N},
         "128x256k64cm2h",
         true,
         true},
        {Shader::kMatmulCm2256x128K64H,
         "matmul (workgroup-scope cooperative matrix, 256x128 block, K slice 64, fp16 x)",
         Code(kMatmulCm2256x128K64H),
         {EDGE_MATMUL_CM2_256X128_K64_H_M, EDGE_MATMUL_CM2_256X128_K64_H_N},
         "256x128k64cm2h",
         true,
         true},
        {Shader::kMatmulCm2128x256K64HU2,
         "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64, fp16 x, 2 slices "
         "a step)",
         Code(kMatmulCm2128x256K64HU2),
         {EDGE_MATMUL_CM2_128X256_K64_H_U2_M, EDGE_MATMUL_CM2_128X256_K64_H_U2_N},
         "128x256k64cm2h-u2",
         true,
         true},
        {Shader::kMatmulCm2128x256K64HU8,
         "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64, fp16 x, 8 slices "
         "a step)",
         Code(kMatmulCm2128x256K64HU8),
         {EDGE_MATMUL_CM2_128X256_K64_H_U8_M, EDGE_MATMUL_CM2_128X256_K64_H_U8_N},
         "128x256k64cm2h-u8",
         true,
         true},
        {Shader::kMatmulCm2128x256HU8,
         "matmul (workgroup-scope cooperative matrix, 128x256 block, fp16 x, 8 slices a step)",
         Code(kMatmulCm2128x256HU8),
         {EDGE_MATMUL_CM2_128X256_H_U8_M, EDGE_MATMUL_CM2_128X256_H_U8_N},
         "128x256k32cm2h-u8",
         true,
         true},
        {Shader::kMatmulCm2128x256HS,
         "matmul (workgroup-scope cooperative matrix, 128x256 block, fp16 x, staged by the shader)",
         Code(kMatmulCm2128x256HS),
         {EDGE_MATMUL_CM2_128X256_H_S_M, EDGE_MATMUL_CM2_128X256_H_S_N},
         "128x256k32cm2h-s",
         true,
         true},
        {Shader::kMatmulCm2256x128HS,
         "matmul (workgroup-scope cooperative matrix, 256x128 block, fp16 x, staged by the shader)",
         Code(kMatmulCm2256x128HS),
         {EDGE_MATMUL_CM2_256X128_H_S_M, EDGE_MATMUL_CM2_256X128_H_S_N},
         "256x128k32cm2h-s",
         true,
         true},
        {Shader::kMatmulCm2128x128K64HS,
         "matmul (workgroup-scope cooperative matrix, 128x128 block, K slice 64, fp16 x, staged "
         "by the shader)",
         Code(kMatmulCm2128x128K64HS),
         {EDGE_MATMUL_CM2_128X128_K64_H_S_M, EDGE_MATMUL_CM2_128X128_K64_H_S_N},
         "128x128k64cm2h-s",
         true,
         true},
        {Shader::kMatmulFeed128x128K64,
         "128x128k64cm2h-s: global loads, shared stores and barriers alone",
         Code(kMatmulFeed128x128K64),
         {EDGE_MATMUL_FEED_128X128_K64_M, EDGE_MATMUL_FEED_128X128_K64_N}},
        {Shader::kMatmulNoFeed128x128K64,
         "128x128k64cm2h-s: fragment loads from shared memory, barriers and products alone",
         Code(kMatmulNoFeed128x128K64),
         {EDGE_MATMUL_NOFEED_128X128_K64_M, EDGE_MATMUL_NOFEED_128X128_K64_N}},
        {Shader::kMatmulFeed128x256,
         "128x256k32cm2h-s: global loads, shared stores and barriers alone",
         Code(kMatmulFeed128x256),
         {EDGE_MATMUL_FEED_128X256_M, EDGE_MATMUL_FEED_128X256_N}},
        {Shader::kMatmulNoFeed128x256,
         "128x256k32cm2h-s: fragment loads from shared memory, barriers and products alone",
         Code(kMatmulNoFeed128x256),
         {EDGE_MATMUL_NOFEED_128X256_M, EDGE_MATMUL_NOFEED_128X256_N}},
        {Shader::kMmaPeakCm2,
         "matrix units alone (workgroup-scope cooperative matrix, 128x256 block)",
         Code(kMmaPeakCm2),
         {EDGE_MMA_PEAK_CM2_M, EDGE_MMA_PEAK_CM2_N}},
#endif
  };
  return *shaders;
}

const ShaderInfo* Find(Shader shader) {
  for (const ShaderInfo& info : Shaders()) {
    if (info.shader == shader) return &info;
  }
  return nullptr;
}

}  // namespace

SpirV ShaderCode(Shader shader) {
  const ShaderInfo* info = Find(shader);
  return info != nullptr ? info->code : SpirV{nullptr, 0};
}

int64_t MmaPeakSlice() {
#if EDGE_HAVE_CM2
  return EDGE_MMA_PEAK_CM2_K;
#else
  return 0;
#endif
}

OutputBlock MatmulOutputBlock(Shader shader) {
  const ShaderInfo* info = Find(shader);
  return info != nullptr ? info->block : OutputBlock{1, 1};
}

const char* ShaderName(Shader shader) {
  const ShaderInfo* info = Find(shader);
  return info != nullptr ? info->name : "?";
}

const std::vector<CoopMatmulVariant>& CoopMatmulVariants() {
  static const auto* variants = [] {
    auto* list = new std::vector<CoopMatmulVariant>;
    for (const ShaderInfo& info : Shaders()) {
      if (info.coop_block != nullptr) {
        list->push_back({info.shader, info.coop_block, info.workgroup_scope, info.half_input});
      }
    }
    return list;
  }();
  return *variants;
}

std::vector<AttentionVariant> AttentionCm2Shaders() {
  std::vector<AttentionVariant> built;
  for (const AttentionVariant& variant : {AttentionVariant{Shader::kAttentionCm2, "cm2"},
                                          AttentionVariant{Shader::kAttentionCm2Br128, "cm2br128"},
                                          AttentionVariant{Shader::kAttentionCm2Hd64, "cm2hd64"}}) {
    if (Find(variant.shader) != nullptr) built.push_back(variant);
  }
  return built;
}

}  // namespace fsdpd::edge
