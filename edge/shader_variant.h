// One compute shader variant: a source compiled with its defines to SPIR-V, as a list names it
// (edge/shaders/variants.cmake; the bench's probes, bench/edge_shaders/variants.cmake). The
// build turns each list into an enum and a table of these rows (edge/shader_table.cmake), so
// every field here comes from the variant's one entry; nothing is written twice.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdpd::edge {

// SPIR-V words; empty (no words) for a variant this build could not compile (a workgroup-scope
// one without slang's glslang).
struct SpirV {
  const uint32_t* words;
  size_t bytes;
};

// The output block one workgroup computes: a matmul's rows × columns (its dispatch grid is
// ⌈N / cols⌉ × ⌈M / rows⌉), attention_cm2.comp's {queries, largest head_dim}; {1, 1} for the
// other shaders.
struct OutputBlock {
  int64_t rows;
  int64_t cols;
};

// The cooperative matrices a variant needs of the device: none, VK_NV_cooperative_matrix
// (subgroup scope) or VK_NV_cooperative_matrix2 (workgroup scope, which also needs slang's
// glslang at build time).
enum class Matrices { kNone, kSubgroup, kWorkgroup };

struct ShaderVariant {
  const char* id;       // its enumerator: "kMatmulCoop"
  const char* name;     // for messages and op times: "matmul (cooperative matrix)"
  const char* source;   // "matmul_coop.comp"
  const char* defines;  // as given to the compiler: "-DWEIGHTS_F16 -DBM=128 …"
  SpirV code;
  uint32_t bindings;    // storage buffers, bound 0, 1, …
  uint32_t push_bytes;  // push constants the host passes
  OutputBlock block;    // from the defines BM × BN, or BR × HD
  int64_t slice;        // the K slice (BK); 0 where it has none
  Matrices matrices;
  bool half_input;  // reads x as fp16 (-DX_F16)
  // A cooperative-matrix matmul block the tuner chooses among, by the name
  // VulkanOptions::coop_block takes ("128x128k32"); nullptr for every other shader.
  const char* matmul;
  // A workgroup-scope attention shader, by the name VulkanOptions::attention takes ("cm2");
  // nullptr for every other shader.
  const char* attention;

  bool built() const { return code.bytes > 0; }
};

}  // namespace fsdpd::edge
