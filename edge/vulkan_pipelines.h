// The pipelines VulkanBackend runs its ops on, chosen and built when it is created: which shader
// variant serves each op on this device and with these options (fp16 or fp32, cooperative
// matrices, the matvec layout, fp16 matmul inputs), the matmul blocks and attention shaders the
// tuners choose among, and why a cheaper path was taken where a pipeline was refused. Which
// candidate runs a given shape is the backend's business (edge/vulkan_backend.cc). Internal to
// edge/.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/shaders.h"
#include "edge/vulkan_backend.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {

// The block VulkanOptions::coop_block names, refused with the list when it was not built (an
// empty name, every block, gives the first).
absl::StatusOr<Shader> CoopShader(const std::string& block);

// One of the matmul's candidates: a cooperative-matrix block, or the tiled shader.
struct MatmulPipeline {
  Pipeline pipeline;
  OutputBlock block;
  std::string name;
  // Reads x as fp16: an fp16 x (MatmulInput) is bound directly, an fp32 one goes through
  // ToHalf's scratch buffer first.
  bool half_input = false;
};

// One of attention's candidates on cooperative matrices.
struct AttentionPipeline {
  Pipeline pipeline;
  int64_t queries;       // a workgroup's
  int64_t max_head_dim;  // the largest head_dim the shader takes
  bool half_input;       // reads qkv through ToHalf's scratch buffer
  std::string name;
};

struct VulkanPipelines {
  // Every pipeline `options` asks for on `context`'s device. A refused cooperative-matrix
  // pipeline falls back (the tiled matmul, attention on the vector units; *_refused says why);
  // a refused one the backend cannot do without is an error, as is an attention shader
  // (options.attention) the device does not have.
  static absl::StatusOr<std::unique_ptr<VulkanPipelines>> Build(VulkanContext& context,
                                                                const VulkanOptions& options);
  explicit VulkanPipelines(VulkanContext& context) : context(context) {}
  ~VulkanPipelines();  // destroys every pipeline; the context must still be open
  VulkanPipelines(const VulkanPipelines&) = delete;
  VulkanPipelines& operator=(const VulkanPipelines&) = delete;

  // Describe()'s parts: how the matmul and attention run, and why not faster where refused.
  std::string MatmulPath() const;
  std::string AttentionPath() const;
  // The matvec's layout as MatvecLayoutName names it (int8's wide words aside).
  std::string MatvecPath() const;
  // Of a matvec shader's {narrow, wide, wide 2 columns, wide 4 columns} variants, the one this
  // layout runs.
  Shader MatvecVariant(const std::array<Shader, 4>& variants) const;
  // VulkanBackend::pipeline_statistics: each matmul candidate's and the matvecs', or one line
  // saying why none.
  std::vector<std::string> Statistics() const;

  VulkanContext& context;
  Pipeline embedding, elementwise, rmsnorm, token_nll, argmax, attention;
  Pipeline attention_decode;  // CausalAttentionAt of a few rows (decoding)
  Pipeline attention_decode_combine;
  Pipeline attention_decode_in_place;  // the two above in one dispatch (-DCOMBINE_IN_PLACE)
  Pipeline to_half;                    // wherever fp16 is on
  // Whether MatmulInput buffers are fp16 (some matmul reads fp16 x), and the producers that
  // write them.
  bool half_inputs = false;
  Pipeline rmsnorm_half, elementwise_half;
  // Linear of a few rows, with fp32 x and (where half_inputs) fp16 x, in the wide layout or the
  // narrow one (VulkanOptions::matvec_layout).
  Pipeline matvec, matvec_half;
  bool matvec_wide = false;
  bool int8_words = false;  // the int8 matvec reads a word a lane (MatvecLayout::kWideWords)
  // Output columns a subgroup of the wide matvec computes (MatvecLayout::kWide2, kWide4).
  int subgroup_columns = 1;
  // Whether the matmul runs on cooperative matrices (the extension is enabled and some block
  // was built); else why not, where a pipeline was refused.
  bool coop = false;
  std::string coop_refused;
  // The matmul's candidates: the cooperative-matrix blocks, or the tiled shader alone (and its
  // fp16-x twin where asked for).
  std::vector<MatmulPipeline> matmuls;
  // Whether attention runs on cooperative matrices (where head_dim is a multiple of 16):
  // attention_coop.comp first, then the workgroup-scope shaders (or the one
  // VulkanOptions::attention pins). Else why not, where it was refused.
  bool coop_attention = false;
  std::string attention_refused;
  std::vector<AttentionPipeline> attentions;

  // int8 weights (Backend::Int8Weight), built by BuildInt8 when the first one is placed: the
  // matvec in the layout above (and its fp16-x twin where half_inputs), and the matmul's int8
  // candidates, tuned per shape as the others: where the matmul runs on cooperative matrices,
  // the subgroup blocks that dequantize to fp16 as they stage (matmul_coop.comp -DWEIGHTS_INT8)
  // and, with workgroup-scope matrices and fp16 x, the staged workgroup-scope blocks
  // (matmul_cm2.comp -DWEIGHTS_INT8), else (or where the driver refused them) the tiled shader;
  // each reading fp32 x and, where half_inputs, fp16 x. On the matrix units an fp32 x may
  // reach the fp16-x ones through ToHalf (every such block rounds x to fp16 as it stages it);
  // the tiled int8 shader reads only the x it was built for. VulkanOptions::int8_block pins one
  // by name.
  bool int8 = false;
  bool int8_on_matrices = false;  // some cooperative-matrix int8 block was built
  Pipeline matvec_int8, matvec_int8_half;
  std::vector<MatmulPipeline> int8_matmuls;
  std::string int8_coop_refused;
  std::string int8_block;  // VulkanOptions::int8_block
  absl::Status BuildInt8(int threads);
  // Describe()'s part for int8 weights, once built: how their matmul runs.
  std::string Int8Path() const;

 private:
  absl::Status BuildAll(const VulkanOptions& options);
  absl::Status Make(Shader shader, Pipeline* out);
  // Builds candidates[i].pipeline from shaders[i] for every i, several at once
  // (VulkanContext::MakePipelines), and returns the candidates whose pipeline was built, in
  // order; the first refusal's message goes to *refused where given.
  template <typename Candidate>
  std::vector<Candidate> BuildEach(std::vector<Candidate> candidates,
                                   const std::vector<Shader>& shaders, int threads,
                                   std::string* refused);
  // Keeps only the attention shader `name` names (none: all of them), or says which exist.
  absl::Status PinAttention(const std::string& name);
};

}  // namespace fsdpd::edge
