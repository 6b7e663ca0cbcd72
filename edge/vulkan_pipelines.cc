#include "edge/vulkan_pipelines.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "edge/vulkan_op_checks.h"

namespace fsdpd::edge {

absl::StatusOr<Shader> CoopShader(const std::string& block) {
  const std::vector<CoopMatmulVariant>& variants = CoopMatmulVariants();
  if (block.empty()) return variants.front().shader;
  std::vector<std::string> names;
  for (const CoopMatmulVariant& variant : variants) {
    if (block == variant.block) return variant.shader;
    names.push_back(variant.block);
  }
  return absl::InvalidArgumentError(absl::StrCat("cooperative-matrix block '", block,
                                                 "' is not built; the blocks are ",
                                                 absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::unique_ptr<VulkanPipelines>> VulkanPipelines::Build(
    VulkanContext& context, const VulkanOptions& options) {
  auto pipelines = std::make_unique<VulkanPipelines>(context);
  FSDPD_RETURN_IF_ERROR(pipelines->BuildAll(options));
  return pipelines;
}

VulkanPipelines::~VulkanPipelines() {
  for (Pipeline* p :
       {&embedding, &elementwise, &rmsnorm, &token_nll, &argmax, &attention, &attention_decode,
        &attention_decode_combine, &attention_decode_in_place, &to_half, &rmsnorm_half,
        &elementwise_half, &matvec, &matvec_half, &matvec_int8, &matvec_int8_half}) {
    context.DestroyPipeline(p);
  }
  for (MatmulPipeline& matmul : matmuls) context.DestroyPipeline(&matmul.pipeline);
  for (MatmulPipeline& matmul : int8_matmuls) context.DestroyPipeline(&matmul.pipeline);
  for (AttentionPipeline& candidate : attentions) context.DestroyPipeline(&candidate.pipeline);
}

absl::Status VulkanPipelines::Make(Shader shader, Pipeline* out) {
  return context.MakePipeline(VariantOf(shader), out);
}

absl::Status VulkanPipelines::BuildAll(const VulkanOptions& options) {
  FSDPD_ASSIGN_OR_RETURN(const Shader coop_shader, CoopShader(options.coop_block));
  const bool fp16 = context.fp16();
  FSDPD_RETURN_IF_ERROR(Make(fp16 ? Shader::kEmbeddingF16 : Shader::kEmbedding, &embedding));
  FSDPD_RETURN_IF_ERROR(Make(Shader::kElementwise, &elementwise));
  FSDPD_RETURN_IF_ERROR(Make(fp16 ? Shader::kRmsNormF16 : Shader::kRmsNorm, &rmsnorm));
  FSDPD_RETURN_IF_ERROR(Make(Shader::kTokenNll, &token_nll));
  FSDPD_RETURN_IF_ERROR(Make(Shader::kArgmax, &argmax));
  FSDPD_RETURN_IF_ERROR(Make(Shader::kAttention, &attention));
  FSDPD_RETURN_IF_ERROR(Make(Shader::kAttentionDecode, &attention_decode));
  FSDPD_RETURN_IF_ERROR(Make(Shader::kAttentionDecodeCombine, &attention_decode_combine));
  FSDPD_RETURN_IF_ERROR(Make(Shader::kAttentionDecodeInPlace, &attention_decode_in_place));
  if (fp16) {
    // The fp16 cast in front of the half_input matmuls when x is fp32 (and of the
    // workgroup-scope attention); without it those pipelines are left out.
    absl::Status made = Make(Shader::kToHalf, &to_half);
    if (!made.ok()) context.DestroyPipeline(&to_half);
  }
  coop = context.coop();
  if (coop) {
    // Every block shape unless one is named; the tuner then picks one per matmul shape. A
    // driver that reports the fragment shape but refuses every pipeline falls back to the
    // tiled shader, and Describe() says so.
    std::vector<MatmulPipeline> candidates;
    std::vector<Shader> shaders;
    for (const CoopMatmulVariant& variant : CoopMatmulVariants()) {
      if (!options.coop_block.empty() && variant.shader != coop_shader) continue;
      if (variant.workgroup_scope && !context.cm2()) continue;
      if (variant.half_input && to_half.pipeline == VK_NULL_HANDLE) continue;
      candidates.push_back(
          {{}, VariantOf(variant.shader).block, variant.block, variant.half_input});
      shaders.push_back(variant.shader);
    }
    matmuls = BuildEach(std::move(candidates), shaders, options.pipeline_threads, &coop_refused);
    coop = !matmuls.empty();
    if (coop) coop_refused.clear();
  }
  if (!coop) {
    const Shader tiled = fp16 ? Shader::kMatmulF16 : Shader::kMatmul;
    MatmulPipeline matmul{{}, VariantOf(tiled).block, "tiled"};
    FSDPD_RETURN_IF_ERROR(Make(tiled, &matmul.pipeline));
    matmuls.push_back(matmul);
    if (fp16 && options.matmul_inputs == VulkanOptions::MatmulInputs::kFp16) {
      // Asked for fp16 matmul inputs: the same shader reading x as fp16, for the activations
      // that RmsNorm and Silu write in fp16 (MatmulInput); it rounds x to fp16 in shared
      // memory anyway, so the results are the same. Not built otherwise: it ran slower than
      // the fp32-x shader (VulkanOptions::matmul_inputs). A refusal keeps every activation
      // fp32.
      MatmulPipeline half{{}, VariantOf(Shader::kMatmulF16HalfX).block, "tiled-h", true};
      if (Make(Shader::kMatmulF16HalfX, &half.pipeline).ok()) {
        matmuls.push_back(half);
      } else {
        context.DestroyPipeline(&half.pipeline);
      }
    }
  }
  // Where some matmul reads x as fp16 (workgroup-scope blocks, or the tiled one when asked
  // for), the activations only a matmul reads are stored in fp16 (MatmulInput), written so
  // by RmsNorm and Silu: no fp32 copy for ToHalf to read back.
  half_inputs = fp16 && options.matmul_inputs != VulkanOptions::MatmulInputs::kFp32 &&
                std::any_of(matmuls.begin(), matmuls.end(),
                            [](const MatmulPipeline& matmul) { return matmul.half_input; });
  if (half_inputs) {
    FSDPD_RETURN_IF_ERROR(Make(Shader::kRmsNormF16HalfOut, &rmsnorm_half));
    FSDPD_RETURN_IF_ERROR(Make(Shader::kElementwiseHalfOut, &elementwise_half));
  }
  int8_block = options.int8_block;
  int8_words = options.matvec_layout == VulkanOptions::MatvecLayout::kWideWords;
  // kAuto on a GPU is the wide layout with 2 columns a subgroup: on an H100 it decoded the seed
  // shape's int8 weights 17% faster than one column, its fp16 ones as fast, and the small shape
  // 1–4% slower (bench/RESULTS.md, calls E5, E8 and E9).
  const bool automatic_wide =
      options.matvec_layout == VulkanOptions::MatvecLayout::kAuto && context.info().type != "cpu";
  subgroup_columns = options.matvec_layout == VulkanOptions::MatvecLayout::kWide2 || automatic_wide
                         ? 2
                     : options.matvec_layout == VulkanOptions::MatvecLayout::kWide4 ? 4
                                                                                    : 1;
  matvec_wide = options.matvec_layout == VulkanOptions::MatvecLayout::kWide || int8_words ||
                subgroup_columns > 1;
  if (half_inputs) {
    FSDPD_RETURN_IF_ERROR(
        Make(MatvecVariant({Shader::kMatvecF16HalfX, Shader::kMatvecF16HalfXWide,
                            Shader::kMatvecF16HalfXWide2, Shader::kMatvecF16HalfXWide4}),
             &matvec_half));
  }
  FSDPD_RETURN_IF_ERROR(Make(fp16
                                 ? MatvecVariant({Shader::kMatvecF16, Shader::kMatvecF16Wide,
                                                  Shader::kMatvecF16Wide2, Shader::kMatvecF16Wide4})
                                 : MatvecVariant({Shader::kMatvec, Shader::kMatvecWide,
                                                  Shader::kMatvecWide2, Shader::kMatvecWide4}),
                             &matvec));
  if (coop && context.info().subgroup_vote) {
    // Attention on the same fragments where the matmul has them (and subgroup votes); a
    // refusal keeps the vector shader, and Describe() says so.
    AttentionPipeline subgroup{{}, 64, kMaxAttentionHeadDim, false, "subgroup"};
    absl::Status made = Make(Shader::kAttentionCoop, &subgroup.pipeline);
    coop_attention = made.ok();
    if (made.ok()) {
      attentions.push_back(subgroup);
    } else {
      context.DestroyPipeline(&subgroup.pipeline);
      attention_refused = std::string(made.message());
    }
  }
  if (coop_attention) {
    // The workgroup-scope attention shaders beside it (they read qkv through ToHalf), timed
    // against it per shape; one the driver refuses is left out.
    std::vector<AttentionPipeline> candidates;
    std::vector<Shader> shaders;
    for (const AttentionVariant& variant : AttentionCm2Shaders()) {
      if (!context.cm2() || to_half.pipeline == VK_NULL_HANDLE) break;
      const OutputBlock block = VariantOf(variant.shader).block;
      candidates.push_back({{}, block.rows, block.cols, true, variant.name});
      shaders.push_back(variant.shader);
    }
    std::vector<AttentionPipeline> built =
        BuildEach(std::move(candidates), shaders, options.pipeline_threads, nullptr);
    attentions.insert(attentions.end(), built.begin(), built.end());
  }
  return PinAttention(options.attention);
}

absl::Status VulkanPipelines::BuildInt8(int threads) {
  if (int8) return absl::OkStatus();
  // The cooperative-matrix candidates this device can run, by name; a pinned name is checked
  // before anything is built.
  std::vector<MatmulPipeline> candidates;
  std::vector<Shader> shaders;
  std::vector<std::string> names;
  for (const Shader shader :
       {Shader::kMatmulCoopInt8, Shader::kMatmulCoopInt8256x128, Shader::kMatmulCoopInt8HalfX,
        Shader::kMatmulCoopInt8256x128HalfX, Shader::kMatmulCm2Int8128x256HS,
        Shader::kMatmulCm2Int8256x128HS, Shader::kMatmulCm2Int8128x128K64HS}) {
    const ShaderVariant& variant = VariantOf(shader);
    const bool workgroup = variant.matrices == Matrices::kWorkgroup;
    if (!coop || (variant.half_input && !half_inputs)) continue;
    if (workgroup && (!context.cm2() || !variant.built())) continue;
    const std::string name =
        absl::StrCat("int8 ", variant.block.rows, "x", variant.block.cols, "k", variant.slice,
                     workgroup ? "cm2" : "", variant.half_input ? "h" : "", workgroup ? "-s" : "");
    names.push_back(name);
    if (!int8_block.empty() && name != int8_block) continue;
    candidates.push_back({{}, variant.block, name, variant.half_input});
    shaders.push_back(shader);
  }
  for (const char* tiled : {"int8 tiled", "int8 tiled-h"}) names.push_back(tiled);
  if (!int8_block.empty() && std::find(names.begin(), names.end(), int8_block) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("int8 matmul '", int8_block,
                                                   "' is not built here; the int8 matmuls are ",
                                                   absl::StrJoin(names, ", ")));
  }
  const Shader fp32_x = int8_words
                            ? Shader::kMatvecInt8Words
                            : MatvecVariant({Shader::kMatvecInt8, Shader::kMatvecInt8Wide,
                                             Shader::kMatvecInt8Wide2, Shader::kMatvecInt8Wide4});
  const Shader fp16_x =
      int8_words ? Shader::kMatvecInt8HalfXWords
                 : MatvecVariant({Shader::kMatvecInt8HalfX, Shader::kMatvecInt8HalfXWide,
                                  Shader::kMatvecInt8HalfXWide2, Shader::kMatvecInt8HalfXWide4});
  FSDPD_RETURN_IF_ERROR(Make(fp32_x, &matvec_int8));
  if (half_inputs) FSDPD_RETURN_IF_ERROR(Make(fp16_x, &matvec_int8_half));
  if (!candidates.empty()) {
    int8_matmuls = BuildEach(std::move(candidates), shaders, threads, &int8_coop_refused);
    int8_on_matrices = !int8_matmuls.empty();
  }
  // The tiled shader for each x the blocks above leave without a candidate (all of them where
  // there are no cooperative matrices).
  for (const bool half : {false, true}) {
    if (half && !half_inputs) continue;
    if (std::any_of(int8_matmuls.begin(), int8_matmuls.end(),
                    [half](const MatmulPipeline& matmul) { return matmul.half_input == half; })) {
      continue;
    }
    const Shader tiled = half ? Shader::kMatmulInt8HalfX : Shader::kMatmulInt8;
    MatmulPipeline matmul{{}, VariantOf(tiled).block, half ? "int8 tiled-h" : "int8 tiled", half};
    absl::Status made = Make(tiled, &matmul.pipeline);
    if (!made.ok()) {
      context.DestroyPipeline(&matmul.pipeline);
      return made;
    }
    int8_matmuls.push_back(matmul);
  }
  int8 = true;
  return absl::OkStatus();
}

Shader VulkanPipelines::MatvecVariant(const std::array<Shader, 4>& variants) const {
  if (!matvec_wide) return variants[0];
  return variants[subgroup_columns == 4 ? 3 : subgroup_columns == 2 ? 2 : 1];
}

std::string VulkanPipelines::MatvecPath() const {
  if (!matvec_wide) return "narrow";
  if (subgroup_columns == 1) return "wide";
  return absl::StrCat("wide, ", subgroup_columns, " columns a subgroup");
}

std::string VulkanPipelines::Int8Path() const {
  if (!int8) return "";
  std::vector<std::string> names;
  for (const MatmulPipeline& matmul : int8_matmuls) names.push_back(matmul.name);
  return absl::StrCat(
      "int8 weights: matvec ", int8_words ? "wide words" : MatvecPath(), ", matmul ",
      absl::StrJoin(names, ", "), int8_matmuls.size() > 1 ? " (tuned per shape)" : "",
      int8_coop_refused.empty()
          ? ""
          : absl::StrCat(" (the cooperative-matrix int8 pipeline was refused: ", int8_coop_refused,
                         ")"));
}

template <typename Candidate>
std::vector<Candidate> VulkanPipelines::BuildEach(std::vector<Candidate> candidates,
                                                  const std::vector<Shader>& shaders, int threads,
                                                  std::string* refused) {
  std::vector<VulkanContext::PipelineRequest> requests;
  for (size_t i = 0; i < candidates.size(); ++i) {
    requests.push_back({&VariantOf(shaders[i]), &candidates[i].pipeline});
  }
  const std::vector<absl::Status> made = context.MakePipelines(requests, threads);
  std::vector<Candidate> built;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (made[i].ok()) {
      built.push_back(candidates[i]);
      continue;
    }
    context.DestroyPipeline(&candidates[i].pipeline);
    if (refused != nullptr && refused->empty()) *refused = std::string(made[i].message());
  }
  return built;
}

absl::Status VulkanPipelines::PinAttention(const std::string& name) {
  if (name.empty()) return absl::OkStatus();
  std::vector<std::string> names;
  for (size_t i = 0; i < attentions.size(); ++i) {
    if (attentions[i].name == name) {
      for (size_t j = 0; j < attentions.size(); ++j) {
        if (j != i) context.DestroyPipeline(&attentions[j].pipeline);
      }
      attentions = {attentions[i]};
      return absl::OkStatus();
    }
    names.push_back(attentions[i].name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("attention shader '", name, "' is not available on this device",
                   names.empty() ? " (attention runs on the vector units here)"
                                 : absl::StrCat("; it has ", absl::StrJoin(names, ", "))));
}

std::string VulkanPipelines::MatmulPath() const {
  if (!coop) {
    return coop_refused.empty()
               ? "tiled"
               : absl::StrCat("tiled (the cooperative-matrix pipeline was refused: ", coop_refused,
                              ")");
  }
  return absl::StrCat(
      "on cooperative matrices (",
      context.cm2() ? "NV subgroup 16x16x16 and workgroup scope" : "NV, 16x16x16", "; ",
      matmuls.size() == 1 ? absl::StrCat("block ", matmuls.front().name)
                          : absl::StrCat(matmuls.size(), " blocks, tuned per shape"),
      ")");
}

std::string VulkanPipelines::AttentionPath() const {
  if (coop_attention) {
    return absl::StrCat(
        "on cooperative matrices where head_dim is a multiple of 16",
        attentions.size() > 1 ? " (subgroup and workgroup scope, tuned per shape)" : "");
  }
  if (attention_refused.empty()) return "on the vector units";
  return absl::StrCat(
      "on the vector units (the cooperative-matrix pipeline was refused: ", attention_refused, ")");
}

std::vector<std::string> VulkanPipelines::Statistics() const {
  std::vector<std::string> lines;
  for (const MatmulPipeline& matmul : matmuls) {
    absl::StatusOr<std::string> statistics = context.Statistics(matmul.pipeline);
    if (!statistics.ok()) return {std::string(statistics.status().message())};
    lines.push_back(absl::StrCat(matmul.name, ": ", *statistics));
  }
  // Decoding's matvec in its layout, and the int8 one where int8 weights were placed.
  for (const auto& [name, pipeline] :
       {std::pair<std::string, const Pipeline*>{"matvec " + MatvecPath(), &matvec},
        {"matvec int8 " + (int8_words ? std::string("wide words") : MatvecPath()),
         int8 ? &matvec_int8 : nullptr}}) {
    if (pipeline == nullptr) continue;
    absl::StatusOr<std::string> statistics = context.Statistics(*pipeline);
    if (statistics.ok()) lines.push_back(absl::StrCat(name, ": ", *statistics));
  }
  return lines;
}

}  // namespace fsdpd::edge
