// The compute shaders, compiled from edge/shaders/*.comp by glslc at build time and embedded
// as SPIR-V words (edge/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fsdpd::edge {

enum class Shader {
  kEmbedding,
  kEmbeddingF16,
  kElementwise,
  kElementwiseHalfOut,  // writes fp16: a matmul's x (Backend::MatmulInput)
  kToHalf,
  kRmsNorm,
  kRmsNormF16,
  kRmsNormF16HalfOut,  // fp16 weights, writes fp16: a matmul's x
  kTokenNll,
  kAttention,
  kAttentionCoop,
  kAttentionDecode,         // a few new positions against a cache, per slice of keys
                            // (attention_decode.comp)
  kAttentionDecodeCombine,  // ... its slices added (attention_decode_combine.comp)
  // attention_cm2.comp (workgroup scope), where built; its output block is {queries a
  // workgroup, the largest head_dim}.
  kAttentionCm2,
  kAttentionCm2Br128,
  kAttentionCm2Hd64,
  kMatmul,
  kMatmulF16,
  kMatmulF16HalfX,  // the tiled fp16 shader reading x as fp16 (matmul.comp -DX_F16)
  kMatvec,          // Linear for a few rows (matvec.comp): decoding's one new position
  kMatvecF16,
  kMatvecF16HalfX,
  kMatvecWide,  // the same in the wide layout (VulkanOptions::matvec_layout)
  kMatvecF16Wide,
  kMatvecF16HalfXWide,
  kMatmulCoop,  // the first of the blocks the tuner chooses among (CoopMatmulVariants)
  kMatmulCoopK64,
  kMatmulCoop256x128,
  kMatmulCoop128x256,
  kMatmulCoopW4,  // 128x128 by four subgroups of 64x64
  kMatmulCoopG8,  // the grouped launch order (GROUP_M 8)
  kMatmulCoop256x128G8,
  kMatmulCoop128x256G8,
  // matmul_cm2.comp (workgroup-scope matrices), where the build had a glslang for it.
  kMatmulCm2,
  kMatmulCm2128x256,
  kMatmulCm2K64,
  kMatmulCm2128x256K64,
  kMatmulCm2256x128,
  // The same with x cast to fp16 first (to_half.comp, then matmul_cm2.comp -DX_F16).
  kMatmulCm2H,
  kMatmulCm2128x256H,
  kMatmulCm2256x128H,
  kMatmulCm2128x256K64H,
  kMatmulCm2256x128K64H,
  kMatmulCm2128x256K64HU2,  // two K slices a step of the fast path (UNROLL)
  kMatmulCm2128x256K64HU8,
  kMatmulCm2128x256HU8,
  kMatmulCm2128x256HS,  // the fast path staged through shared memory by the shader (STAGED)
  kMatmulCm2256x128HS,
  kMatmulCm2128x128K64HS,
  // Probes of the staged blocks, never matmuls (VulkanBackend::StagedMatmulBreakdown): the
  // global loads, shared stores and barriers alone (FEED_ONLY), and the products out of shared
  // memory alone (NO_FEED).
  kMatmulFeed128x128K64,
  kMatmulNoFeed128x128K64,
  kMatmulFeed128x256,
  kMatmulNoFeed128x256,
  // mma_peak_cm2.comp: the matrix units alone (VulkanBackend::MatrixUnitPeak); its block is the
  // accumulator's {rows, columns}, with EDGE_MMA_PEAK_CM2_K the K slice.
  kMmaPeakCm2,
};

// Empty (no words) for a shader this build could not compile (matmul_cm2.comp without slang's
// glslang).
struct SpirV {
  const uint32_t* words;
  size_t bytes;
};

SpirV ShaderCode(Shader shader);

// The K slice of mma_peak_cm2.comp's products (0 where it was not built).
int64_t MmaPeakSlice();

// The output block one workgroup of a matmul shader computes (its dispatch grid is
// ⌈N / cols⌉ × ⌈M / rows⌉); for attention_cm2.comp {queries, largest head_dim}; {1, 1} for the
// other shaders.
struct OutputBlock {
  int64_t rows;
  int64_t cols;
};
OutputBlock MatmulOutputBlock(Shader shader);
const char* ShaderName(Shader shader);

// The cooperative-matrix matmul's block shapes, each with the name
// VulkanOptions::coop_block takes ("128x128k32": rows × columns per workgroup, K slice). The
// workgroup-scope ones (VK_NV_cooperative_matrix2) are listed only where they were built.
// A half_input block reads x as fp16: the host casts x with Shader::kToHalf first.
struct CoopMatmulVariant {
  Shader shader;
  const char* block;
  bool workgroup_scope = false;
  bool half_input = false;
};
const std::vector<CoopMatmulVariant>& CoopMatmulVariants();

// The workgroup-scope attention shaders this build has (none without slang's glslang), each
// with the name VulkanOptions::attention takes.
struct AttentionVariant {
  Shader shader;
  const char* name;
};
std::vector<AttentionVariant> AttentionCm2Shaders();

}  // namespace fsdpd::edge
