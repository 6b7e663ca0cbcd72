#include "edge/vulkan_backend.h"

#include <vulkan/vulkan.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "edge/matmul_tuner.h"
#include "edge/shaders.h"
#include "edge/vulkan_context.h"
#include "edge/vulkan_device.h"
#include "edge/vulkan_probes.h"

namespace fsdpd::edge {
namespace {

constexpr int64_t kMaxAttentionHeadDim = 128;  // attention.comp's MAX_HEAD_DIM
constexpr int64_t kMatvecRows = 4;             // matvec.comp's ROWS
// CausalAttentionAt of at most this many rows runs attention_decode.comp (as Linear of at most
// kMatvecRows runs matvec.comp: decoding's rows).
constexpr int64_t kDecodeAttentionRows = 4;
// The keys a workgroup of attention_decode.comp takes (SPLIT in
// edge/shaders/attention_decode.glsl).
constexpr int64_t kDecodeAttentionSplit = 64;
// Host copies up to this size reuse one staging buffer (VulkanBackendImpl::Staging).
constexpr VkDeviceSize kKeptStagingBytes = 16 << 20;
// matvec.comp's COLUMNS (a workgroup's) in the narrow and the wide layout (edge/CMakeLists.txt).
constexpr int64_t kMatvecColumns = 8;
constexpr int64_t kMatvecWideColumns = 4;

// The block VulkanOptions::coop_block names, refused with the list when it was not built (an
// empty name, every block, gives the first).
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

// An fp16 buffer (MatmulInput's) is written only by RmsNorm, Silu and Add and read only as
// Linear's x; every other use of one reads or writes fp32 and would misread it.
absl::Status RequireFp32(const char* op, const char* role, Buffer& buffer) {
  if (!Vk(buffer).half) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", role,
      " is an fp16 matmul input (Backend::MatmulInput), which only Linear reads as x; ", op,
      " needs an fp32 buffer (Backend::Floats)"));
}

// attention.comp's push constants; the matrix-unit attention shaders read the first six.
struct AttentionPush {
  uint32_t batch, seq, heads, head_dim, causal;
  float scale;
  uint32_t first;  // the position of the first query row (attention.comp only)
};

AttentionPush MakeAttentionPush(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                                bool causal, int64_t first) {
  return {static_cast<uint32_t>(batch),
          static_cast<uint32_t>(seq),
          static_cast<uint32_t>(heads),
          static_cast<uint32_t>(head_dim),
          causal ? 1u : 0u,
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))),
          static_cast<uint32_t>(first)};
}

class VulkanBackendImpl : public VulkanBackend {
 public:
  ~VulkanBackendImpl() override {
    if (context_ == nullptr) return;
    dummy_.reset();
    half_scratch_.reset();
    decode_partials_.reset();
    staging_.reset();
    for (Pipeline* p : {&embedding_, &elementwise_, &rmsnorm_, &token_nll_, &attention_,
                        &attention_decode_, &attention_decode_combine_, &to_half_, &rmsnorm_half_,
                        &elementwise_half_, &matvec_, &matvec_half_}) {
      DestroyPipeline(p);
    }
    for (MatmulPipeline& matmul : matmuls_) DestroyPipeline(&matmul.pipeline);
    for (AttentionPipeline& attention : attentions_) DestroyPipeline(&attention.pipeline);
  }

  absl::Status Init(const VulkanOptions& options) {
    FSDPD_ASSIGN_OR_RETURN(const Shader coop_shader, CoopShader(options.coop_block));
    FSDPD_ASSIGN_OR_RETURN(context_, VulkanContext::Create(options));
    coop_ = context_->coop();
    // Weights: zero-copy where one memory type is device-local and host-visible.
    zero_copy_ = !options.force_staging && context_->zero_copy_memory_type() != UINT32_MAX;

    FSDPD_RETURN_IF_ERROR(MakePipeline(
        context_->fp16() ? Shader::kEmbeddingF16 : Shader::kEmbedding, 3, 8, &embedding_));
    FSDPD_RETURN_IF_ERROR(MakePipeline(Shader::kElementwise, 3, 8, &elementwise_));
    FSDPD_RETURN_IF_ERROR(
        MakePipeline(context_->fp16() ? Shader::kRmsNormF16 : Shader::kRmsNorm, 3, 12, &rmsnorm_));
    FSDPD_RETURN_IF_ERROR(MakePipeline(Shader::kTokenNll, 3, 8, &token_nll_));
    // AttentionPush: the matrix-unit attention shaders read its first 24 bytes.
    FSDPD_RETURN_IF_ERROR(MakePipeline(Shader::kAttention, 2, sizeof(AttentionPush), &attention_));
    FSDPD_RETURN_IF_ERROR(
        MakePipeline(Shader::kAttentionDecode, 2, sizeof(AttentionPush), &attention_decode_));
    FSDPD_RETURN_IF_ERROR(MakePipeline(Shader::kAttentionDecodeCombine, 2, sizeof(AttentionPush),
                                       &attention_decode_combine_));
    if (context_->fp16()) {
      // The fp16 cast in front of the half_input matmuls when x is fp32 (and of the
      // workgroup-scope attention); without it those pipelines are left out.
      absl::Status made = MakePipeline(Shader::kToHalf, 2, 4, &to_half_);
      if (!made.ok()) DestroyPipeline(&to_half_);
    }
    if (coop_) {
      // Every block shape unless one is named; the tuner then picks one per matmul shape. A
      // driver that reports the fragment shape but refuses every pipeline falls back to the
      // tiled shader, and Describe() says so.
      std::vector<MatmulPipeline> candidates;
      std::vector<Shader> shaders;
      for (const CoopMatmulVariant& variant : CoopMatmulVariants()) {
        if (!options.coop_block.empty() && variant.shader != coop_shader) continue;
        if (variant.workgroup_scope && !context_->cm2()) continue;
        if (variant.half_input && to_half_.pipeline == VK_NULL_HANDLE) continue;
        candidates.push_back(
            {{}, MatmulOutputBlock(variant.shader), variant.block, variant.half_input});
        shaders.push_back(variant.shader);
      }
      matmuls_ = BuildEach(std::move(candidates), shaders, 4, 16, options.pipeline_threads,
                           &coop_refused_);
      coop_ = !matmuls_.empty();
      if (coop_) coop_refused_.clear();
    }
    if (!coop_) {
      const Shader tiled = context_->fp16() ? Shader::kMatmulF16 : Shader::kMatmul;
      MatmulPipeline matmul{{}, MatmulOutputBlock(tiled), "tiled"};
      FSDPD_RETURN_IF_ERROR(MakePipeline(tiled, 4, 16, &matmul.pipeline));
      matmuls_.push_back(matmul);
      if (context_->fp16() && options.matmul_inputs == VulkanOptions::MatmulInputs::kFp16) {
        // Asked for fp16 matmul inputs: the same shader reading x as fp16, for the activations
        // that RmsNorm and Silu write in fp16 (MatmulInput); it rounds x to fp16 in shared
        // memory anyway, so the results are the same. Not built otherwise: it ran slower than
        // the fp32-x shader (VulkanOptions::matmul_inputs). A refusal keeps every activation
        // fp32.
        MatmulPipeline half{{}, MatmulOutputBlock(Shader::kMatmulF16HalfX), "tiled-h", true};
        if (MakePipeline(Shader::kMatmulF16HalfX, 4, 16, &half.pipeline).ok()) {
          matmuls_.push_back(half);
        } else {
          DestroyPipeline(&half.pipeline);
        }
      }
    }
    tuner_ = std::make_unique<MatmulTuner>(static_cast<int>(matmuls_.size()));
    // Where some matmul reads x as fp16 (workgroup-scope blocks, or the tiled one when asked
    // for), the activations only a matmul reads are stored in fp16 (MatmulInput), written so
    // by RmsNorm and Silu: no fp32 copy for ToHalf to read back.
    half_inputs_ = context_->fp16() &&
                   options.matmul_inputs != VulkanOptions::MatmulInputs::kFp32 &&
                   std::any_of(matmuls_.begin(), matmuls_.end(),
                               [](const MatmulPipeline& matmul) { return matmul.half_input; });
    if (half_inputs_) {
      FSDPD_RETURN_IF_ERROR(MakePipeline(Shader::kRmsNormF16HalfOut, 3, 12, &rmsnorm_half_));
      FSDPD_RETURN_IF_ERROR(MakePipeline(Shader::kElementwiseHalfOut, 3, 8, &elementwise_half_));
    }
    add_into_linear_ = options.add_into_linear;
    matvec_wide_ = options.matvec_layout == VulkanOptions::MatvecLayout::kWide ||
                   (options.matvec_layout == VulkanOptions::MatvecLayout::kAuto &&
                    context_->info().type != "cpu");
    if (half_inputs_) {
      FSDPD_RETURN_IF_ERROR(
          MakePipeline(matvec_wide_ ? Shader::kMatvecF16HalfXWide : Shader::kMatvecF16HalfX, 4, 16,
                       &matvec_half_));
    }
    const Shader matvec = context_->fp16()
                              ? (matvec_wide_ ? Shader::kMatvecF16Wide : Shader::kMatvecF16)
                              : (matvec_wide_ ? Shader::kMatvecWide : Shader::kMatvec);
    FSDPD_RETURN_IF_ERROR(MakePipeline(matvec, 4, 16, &matvec_));
    if (coop_ && context_->info().subgroup_vote) {
      // Attention on the same fragments where the matmul has them (and subgroup votes); a
      // refusal keeps the vector shader, and Describe() says so.
      AttentionPipeline subgroup{{}, 64, kMaxAttentionHeadDim, false, "subgroup"};
      absl::Status made = MakePipeline(Shader::kAttentionCoop, 2, 24, &subgroup.pipeline);
      coop_attention_ = made.ok();
      if (made.ok()) {
        attentions_.push_back(subgroup);
      } else {
        DestroyPipeline(&subgroup.pipeline);
        attention_refused_ = std::string(made.message());
      }
    }
    if (coop_attention_) {
      // The workgroup-scope attention shaders beside it (they read qkv through ToHalf), timed
      // against it per shape; one the driver refuses is left out.
      std::vector<AttentionPipeline> candidates;
      std::vector<Shader> shaders;
      for (const AttentionVariant& variant : AttentionCm2Shaders()) {
        if (!context_->cm2() || to_half_.pipeline == VK_NULL_HANDLE) break;
        const OutputBlock block = MatmulOutputBlock(variant.shader);
        candidates.push_back({{}, block.rows, block.cols, true, variant.name});
        shaders.push_back(variant.shader);
      }
      std::vector<AttentionPipeline> built =
          BuildEach(std::move(candidates), shaders, 2, 24, options.pipeline_threads, nullptr);
      attentions_.insert(attentions_.end(), built.begin(), built.end());
    }
    FSDPD_RETURN_IF_ERROR(PinAttention(options.attention));
    if (!attentions_.empty()) {
      attention_tuner_ = std::make_unique<MatmulTuner>(static_cast<int>(attentions_.size()));
    }
    // Bound where a shader's optional input is absent (a Linear without bias).
    FSDPD_ASSIGN_OR_RETURN(dummy_, CreateBuffer(16, false));
    return absl::OkStatus();
  }

  // Keeps only the attention shader `name` names (none: all of them), or says which exist.
  absl::Status PinAttention(const std::string& name) {
    if (name.empty()) return absl::OkStatus();
    std::vector<std::string> names;
    for (size_t i = 0; i < attentions_.size(); ++i) {
      if (attentions_[i].name == name) {
        for (size_t j = 0; j < attentions_.size(); ++j) {
          if (j != i) DestroyPipeline(&attentions_[j].pipeline);
        }
        attentions_ = {attentions_[i]};
        return absl::OkStatus();
      }
      names.push_back(attentions_[i].name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("attention shader '", name, "' is not available on this device",
                     names.empty() ? " (attention runs on the vector units here)"
                                   : absl::StrCat("; it has ", absl::StrJoin(names, ", "))));
  }

  std::string Describe() const override {
    return absl::StrCat(
        "vulkan device ", context_->info().index, " '", context_->info().name, "' (",
        context_->info().type, "), ",
        context_->fp16() ? "fp16 weights and math, fp32 accumulation" : "fp32", ", matmul ",
        MatmulPath(), ", attention ", AttentionPath(), ", weights ",
        zero_copy_ ? "zero-copy (device-local host-visible heap)" : "uploaded through staging",
        half_inputs_ ? ", matmul inputs fp16" : "", ", decoding's matvec ",
        matvec_wide_ ? "wide" : "narrow");
  }
  std::string MatmulPath() const {
    if (!coop_) {
      return coop_refused_.empty()
                 ? "tiled"
                 : absl::StrCat(
                       "tiled (the cooperative-matrix pipeline was refused: ", coop_refused_, ")");
    }
    return absl::StrCat(
        "on cooperative matrices (",
        context_->cm2() ? "NV subgroup 16x16x16 and workgroup scope" : "NV, 16x16x16", "; ",
        matmuls_.size() == 1 ? absl::StrCat("block ", matmuls_.front().name)
                             : absl::StrCat(matmuls_.size(), " blocks, tuned per shape"),
        ")");
  }
  std::string AttentionPath() const {
    if (coop_attention_) {
      return absl::StrCat(
          "on cooperative matrices where head_dim is a multiple of 16",
          attentions_.size() > 1 ? " (subgroup and workgroup scope, tuned per shape)" : "");
    }
    if (attention_refused_.empty()) return "on the vector units";
    return absl::StrCat("on the vector units (the cooperative-matrix pipeline was refused: ",
                        attention_refused_, ")");
  }
  int validation_errors() const override { return context_->validation_errors(); }
  std::string last_validation_error() const override { return context_->last_validation_error(); }
  bool uses_fp16() const override { return context_->fp16(); }
  bool uses_cooperative_matrix() const override { return coop_; }
  bool zero_copy_weights() const override { return zero_copy_; }
  std::vector<OpTime> op_times() const override { return context_->op_times(); }
  std::vector<OpTime> host_times() const override { return context_->host_times(); }
  int64_t descriptor_sets_written() const override { return context_->descriptor_sets_written(); }
  void ResetOpTimes() override { context_->ResetOpTimes(); }

  absl::Status CheckRoom(double bytes) override { return context_->CheckRoom(bytes); }
  absl::StatusOr<std::unique_ptr<Buffer>> Weight(const float* values, int64_t count) override {
    const VkDeviceSize bytes = static_cast<VkDeviceSize>(count) * (context_->fp16() ? 2 : 4);
    std::vector<uint16_t> halves;
    const void* source = values;
    if (context_->fp16()) {
      halves.resize(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) halves[static_cast<size_t>(i)] = FloatToHalf(values[i]);
      source = halves.data();
    }
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           context_->CreateFilledBuffer(source, bytes, zero_copy_));
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> Floats(int64_t count) override {
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           CreateBuffer(static_cast<VkDeviceSize>(count) * 4, false));
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> MatmulInput(int64_t count) override {
    if (!half_inputs_) return Floats(count);
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           CreateBuffer(static_cast<VkDeviceSize>(count) * 2, false));
    buffer->half = true;
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> Ints(int64_t count) override {
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           CreateBuffer(static_cast<VkDeviceSize>(count) * 4, true));
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  absl::Status WriteInts(Buffer& buffer, const int32_t* values, int64_t count) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("WriteInts", "the buffer", buffer));
    FSDPD_RETURN_IF_ERROR(Finish());  // work enqueued before must see the old values
    std::memcpy(Vk(buffer).mapped, values, static_cast<size_t>(count) * sizeof(int32_t));
    return absl::OkStatus();
  }
  absl::Status WriteFloats(Buffer& buffer, const float* values, int64_t count) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("WriteFloats", "the buffer", buffer));
    const VkDeviceSize bytes = static_cast<VkDeviceSize>(count) * 4;
    if (Vk(buffer).mapped != nullptr) {
      FSDPD_RETURN_IF_ERROR(Finish());  // work enqueued before must see the old values
      std::memcpy(Vk(buffer).mapped, values, bytes);
      return absl::OkStatus();
    }
    // Through staging the copy runs after the work enqueued before, in the same submit. No
    // command recorded reads the staging buffer: every copy through it was waited for.
    std::unique_ptr<VulkanBuffer> one_off;
    FSDPD_ASSIGN_OR_RETURN(VulkanBuffer * staging, Staging(bytes, &one_off));
    std::memcpy(staging->mapped, values, bytes);
    return context_->CopyNow(*staging, Vk(buffer), bytes);
  }
  absl::Status ReadFloats(Buffer& buffer, float* values, int64_t count) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("ReadFloats", "the buffer", buffer));
    const VkDeviceSize bytes = static_cast<VkDeviceSize>(count) * 4;
    if (Vk(buffer).mapped != nullptr) {
      FSDPD_RETURN_IF_ERROR(Finish());
      std::memcpy(values, Vk(buffer).mapped, bytes);
      return absl::OkStatus();
    }
    std::unique_ptr<VulkanBuffer> one_off;
    FSDPD_ASSIGN_OR_RETURN(VulkanBuffer * staging, Staging(bytes, &one_off));
    FSDPD_RETURN_IF_ERROR(context_->CopyNow(Vk(buffer), *staging, bytes));
    std::memcpy(values, staging->mapped, bytes);
    return absl::OkStatus();
  }

  absl::Status Embedding(Buffer& table, Buffer& tokens, int64_t count, int64_t dim,
                         Buffer& out) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("Embedding", "the table", table));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Embedding", "the token ids", tokens));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Embedding", "out", out));
    FSDPD_RETURN_IF_ERROR(CheckIndex("embedding", count * dim));
    const uint32_t push[2] = {static_cast<uint32_t>(count), static_cast<uint32_t>(dim)};
    return Dispatch(embedding_, {&table, &tokens, &out}, push, GridStride(count * dim), 1);
  }
  absl::Status RmsNorm(Buffer& x, Buffer& weight, int64_t rows, int64_t dim, double eps,
                       Buffer& out) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("RmsNorm", "x", x));
    FSDPD_RETURN_IF_ERROR(RequireFp32("RmsNorm", "the weight", weight));
    FSDPD_RETURN_IF_ERROR(CheckIndex("rmsnorm", rows * dim));
    struct {
      uint32_t rows, dim;
      float eps;
    } push{static_cast<uint32_t>(rows), static_cast<uint32_t>(dim), static_cast<float>(eps)};
    auto [x_groups, y_groups] = RowGrid(rows);
    return Dispatch(Vk(out).half ? rmsnorm_half_ : rmsnorm_, {&x, &weight, &out}, &push, x_groups,
                    y_groups);
  }
  absl::Status Linear(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows, int64_t in_features,
                      int64_t out_features, Buffer& out) override {
    return LinearOrAdd(x, weight, bias, rows, in_features, out_features, out, /*add=*/false);
  }
  bool AddsIntoLinear(int64_t rows) const override {
    return add_into_linear_ && rows <= kMatvecRows;
  }
  absl::Status LinearAdd(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows, int64_t in_features,
                         int64_t out_features, Buffer& out) override {
    if (!AddsIntoLinear(rows)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "LinearAdd: the add is folded only into matvec.comp's products of up to ", kMatvecRows,
          " rows (decoding's), with VulkanOptions::add_into_linear; not ", rows));
    }
    return LinearOrAdd(x, weight, bias, rows, in_features, out_features, out, /*add=*/true);
  }
  // Linear, or with `add` (matvec.comp only) LinearAdd.
  absl::Status LinearOrAdd(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows,
                           int64_t in_features, int64_t out_features, Buffer& out, bool add) {
    FSDPD_RETURN_IF_ERROR(RequireFp32("Linear", "the weight", weight));
    if (bias != nullptr) FSDPD_RETURN_IF_ERROR(RequireFp32("Linear", "the bias", *bias));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Linear", "out", out));
    // An fp16 x (MatmulInput) is bound as it is, so only the pipelines that read fp16 x can
    // take it; an fp32 x reaches those through ToHalf.
    const bool half_x = Vk(x).half;
    if (half_x && std::none_of(matmuls_.begin(), matmuls_.end(),
                               [](const MatmulPipeline& matmul) { return matmul.half_input; })) {
      return absl::InvalidArgumentError(
          "Linear: x is fp16 but no matmul pipeline here reads fp16 x");
    }
    FSDPD_RETURN_IF_ERROR(CheckIndex("linear input", rows * in_features));
    FSDPD_RETURN_IF_ERROR(CheckIndex("linear weight", out_features * in_features));
    FSDPD_RETURN_IF_ERROR(CheckIndex("linear output", rows * out_features));
    // The flags: bit 0, a bias; bit 1, add into out (matvec.comp's only).
    const uint32_t push[4] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(out_features),
                              static_cast<uint32_t>(in_features),
                              (bias != nullptr ? 1u : 0u) | (add ? 2u : 0u)};
    Buffer& bias_buffer = bias != nullptr ? *bias : *dummy_;
    if (rows <= kMatvecRows) {
      // matvec.comp: a block of the matmul would compute BM rows for these few, and its grid
      // would hold a handful of workgroups.
      const int64_t columns = matvec_wide_ ? kMatvecWideColumns : kMatvecColumns;
      const int64_t groups = (out_features + columns - 1) / columns;
      const int64_t width =
          std::min<int64_t>(groups, context_->limits().maxComputeWorkGroupCount[0]);
      const int64_t height = (groups + width - 1) / width;
      if (height > context_->limits().maxComputeWorkGroupCount[1]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "linear of ", out_features, " outputs needs more workgroups than the device allows"));
      }
      return Dispatch(half_x ? matvec_half_ : matvec_, {&x, &weight, &bias_buffer, &out}, push,
                      static_cast<uint32_t>(width), static_cast<uint32_t>(height));
    }
    auto dispatch = [&](const MatmulPipeline& matmul) -> absl::Status {
      const int64_t x_groups = (out_features + matmul.block.cols - 1) / matmul.block.cols;
      const int64_t y_groups = (rows + matmul.block.rows - 1) / matmul.block.rows;
      if (x_groups > context_->limits().maxComputeWorkGroupCount[0] ||
          y_groups > context_->limits().maxComputeWorkGroupCount[1]) {
        return absl::InvalidArgumentError(
            absl::StrCat("linear of ", rows, " rows × ", out_features,
                         " outputs needs more workgroups than the device allows (",
                         context_->limits().maxComputeWorkGroupCount[0], " × ",
                         context_->limits().maxComputeWorkGroupCount[1], ")"));
      }
      if (half_x && !matmul.half_input) {
        return absl::InternalError(
            absl::StrCat("Linear: the matmul '", matmul.name, "' reads fp32 x, not fp16"));
      }
      Buffer* input = &x;
      if (matmul.half_input && !half_x) {
        FSDPD_ASSIGN_OR_RETURN(input, ToHalf(x, rows * in_features));
      }
      return Dispatch(matmul.pipeline, {input, &weight, &bias_buffer, &out}, push,
                      static_cast<uint32_t>(x_groups), static_cast<uint32_t>(y_groups));
    };
    // A new shape times each candidate alone on these buffers (what is recorded so far is
    // submitted first); `out` is written again by the dispatch recorded below. A pipeline that
    // reads fp32 x never wins for an fp16 x.
    auto time = [&](int candidate) -> absl::StatusOr<double> {
      const MatmulPipeline& matmul = matmuls_[static_cast<size_t>(candidate)];
      if (half_x && !matmul.half_input) return std::numeric_limits<double>::infinity();
      return SecondsAlone([&] { return dispatch(matmul); });
    };
    FSDPD_ASSIGN_OR_RETURN(
        const int chosen,
        tuner_->Choose({rows, in_features, out_features, bias != nullptr, half_x}, time));
    return dispatch(matmuls_[static_cast<size_t>(chosen)]);
  }
  // Seconds `record` takes on the device alone: what is recorded so far is submitted first.
  // For the tuners, which time each candidate on the call's own buffers.
  absl::StatusOr<double> SecondsAlone(const std::function<absl::Status()>& record) {
    FSDPD_RETURN_IF_ERROR(Finish());
    const auto start = std::chrono::steady_clock::now();
    FSDPD_RETURN_IF_ERROR(record());
    FSDPD_RETURN_IF_ERROR(Finish());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // x rounded to fp16 into the scratch buffer the half_input matmul blocks read. The buffer
  // grows to the largest input; what is recorded so far is submitted before the old one goes.
  absl::StatusOr<Buffer*> ToHalf(Buffer& x, int64_t count) {
    const VkDeviceSize bytes = static_cast<VkDeviceSize>(count) * 2;
    if (half_scratch_ == nullptr || half_scratch_->bytes < bytes) {
      FSDPD_RETURN_IF_ERROR(Finish());
      half_scratch_.reset();
      FSDPD_ASSIGN_OR_RETURN(half_scratch_, CreateBuffer(bytes, false));
    }
    const uint32_t push = static_cast<uint32_t>(count);
    const int64_t groups = std::min<int64_t>(std::max<int64_t>((count / 4 + 255) / 256, 1),
                                             context_->limits().maxComputeWorkGroupCount[0]);
    FSDPD_RETURN_IF_ERROR(
        Dispatch(to_half_, {&x, half_scratch_.get()}, &push, static_cast<uint32_t>(groups), 1));
    return half_scratch_.get();
  }
  absl::StatusOr<double> MatrixUnitPeakTflops() override {
    return edge::MatrixUnitPeakTflops(*context_);
  }
  absl::StatusOr<std::vector<StagedMatmulRate>> StagedMatmulBreakdown(int64_t m, int64_t n,
                                                                      int64_t k) override {
    return edge::StagedMatmulBreakdown(*context_, m, n, k);
  }
  std::vector<std::string> pipeline_statistics() const override {
    std::vector<std::string> lines;
    for (const MatmulPipeline& matmul : matmuls_) {
      absl::StatusOr<std::string> statistics = context_->Statistics(matmul.pipeline);
      if (!statistics.ok()) return {std::string(statistics.status().message())};
      lines.push_back(absl::StrCat(matmul.name, ": ", *statistics));
    }
    return lines;
  }
  std::vector<std::string> matmul_choices() const override {
    std::vector<std::string> names;
    for (const MatmulPipeline& matmul : matmuls_) names.push_back(matmul.name);
    std::vector<std::string> lines = tuner_->Describe(names);
    if (attention_tuner_ != nullptr) {
      for (const auto& [key, index] : attention_tuner_->chosen()) {
        lines.push_back(absl::StrCat("attention, batch·heads ", key.rows, ", seq ", key.in_features,
                                     ", head_dim ", key.out_features, key.bias ? ", causal" : "",
                                     ": ", attentions_[static_cast<size_t>(index)].name));
      }
    }
    return lines;
  }
  absl::Status Attention(Buffer& qkv, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                         bool causal, Buffer& out) override {
    FSDPD_ASSIGN_OR_RETURN(const int64_t head_dim,
                           CheckAttention("Attention", qkv, out, batch, batch * seq, heads, dim));
    const AttentionPush push = MakeAttentionPush(batch, seq, heads, head_dim, causal, 0);
    // A workgroup takes 64 queries of one (batch, head), or a workgroup-scope shader's BR.
    const bool matrix_units = coop_attention_ && head_dim % 16 == 0;
    if (!matrix_units) {
      return Dispatch(attention_, {&qkv, &out}, &push, static_cast<uint32_t>((seq + 63) / 64),
                      static_cast<uint32_t>(batch * heads));
    }
    auto dispatch = [&](const AttentionPipeline& attention) -> absl::Status {
      if (attention.max_head_dim < head_dim) {
        return absl::InvalidArgumentError(absl::StrCat("attention shader '", attention.name,
                                                       "' takes head_dim up to ",
                                                       attention.max_head_dim, ", not ", head_dim));
      }
      Buffer* input = &qkv;
      if (attention.half_input) {
        FSDPD_ASSIGN_OR_RETURN(input, ToHalf(qkv, batch * seq * 3 * dim));
      }
      return Dispatch(attention.pipeline, {input, &out}, &push,
                      static_cast<uint32_t>((seq + attention.queries - 1) / attention.queries),
                      static_cast<uint32_t>(batch * heads));
    };
    // As Linear's tuning; a shader whose largest head_dim is too small never wins.
    auto time = [&](int candidate) -> absl::StatusOr<double> {
      const AttentionPipeline& attention = attentions_[static_cast<size_t>(candidate)];
      if (attention.max_head_dim < head_dim) return std::numeric_limits<double>::infinity();
      return SecondsAlone([&] { return dispatch(attention); });
    };
    // The tuner's key, read back by matmul_choices(): batch·heads, seq, head_dim, causal.
    FSDPD_ASSIGN_OR_RETURN(const int chosen,
                           attention_tuner_->Choose({batch * heads, seq, head_dim, causal}, time));
    return dispatch(attentions_[static_cast<size_t>(chosen)]);
  }
  // attention.comp with its queries at positions first… (the matrix-unit shaders have no
  // such offset; one query a step leaves them nothing to gain).
  absl::Status CausalAttentionAt(Buffer& qkv, int64_t first, int64_t rows, int64_t heads,
                                 int64_t dim, Buffer& out) override {
    FSDPD_ASSIGN_OR_RETURN(const int64_t head_dim, CheckAttention("CausalAttentionAt", qkv, out, 1,
                                                                  first + rows, heads, dim));
    const AttentionPush push = MakeAttentionPush(1, rows, heads, head_dim, true, first);
    if (rows <= kDecodeAttentionRows) {
      // attention_decode.comp: a workgroup a (slice of keys, row, head), each slice's softmax
      // and output then added by attention_decode_combine.comp; the 64-query workgroups below
      // would run these rows on 4 invocations each, one after another through every key.
      const int64_t slices = (first + rows + kDecodeAttentionSplit - 1) / kDecodeAttentionSplit;
      FSDPD_ASSIGN_OR_RETURN(VulkanBuffer * partials,
                             DecodePartials(rows * heads * slices * (head_dim + 2)));
      FSDPD_RETURN_IF_ERROR(Dispatch(attention_decode_, {&qkv, partials}, &push,
                                     static_cast<uint32_t>(slices),
                                     static_cast<uint32_t>(rows * heads)));
      return Dispatch(attention_decode_combine_, {partials, &out}, &push,
                      static_cast<uint32_t>(rows * heads), 1);
    }
    return Dispatch(attention_, {&qkv, &out}, &push, static_cast<uint32_t>((rows + 63) / 64),
                    static_cast<uint32_t>(heads));
  }
  // A transfer in the recorded commands, ordered with the dispatches on both sides.
  absl::Status CopyFloats(Buffer& from, int64_t from_offset, Buffer& to, int64_t to_offset,
                          int64_t count) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("CopyFloats", "from", from));
    FSDPD_RETURN_IF_ERROR(RequireFp32("CopyFloats", "to", to));
    FSDPD_RETURN_IF_ERROR(CheckCopyRange(static_cast<int64_t>(Vk(from).bytes / 4), from_offset,
                                         static_cast<int64_t>(Vk(to).bytes / 4), to_offset, count));
    if (count == 0) return absl::OkStatus();
    return context_->RecordCopy(Vk(from), static_cast<VkDeviceSize>(from_offset) * 4, Vk(to),
                                static_cast<VkDeviceSize>(to_offset) * 4,
                                static_cast<VkDeviceSize>(count) * 4);
  }
  absl::Status Silu(Buffer& x, int64_t count, Buffer& out) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("Silu", "x", x));
    FSDPD_RETURN_IF_ERROR(CheckIndex("silu", count));
    const uint32_t push[2] = {static_cast<uint32_t>(count), 1u};
    return Dispatch(Vk(out).half ? elementwise_half_ : elementwise_, {&x, &x, &out}, push,
                    GridStride(count), 1);
  }
  absl::Status Add(Buffer& a, Buffer& b, int64_t count, Buffer& out) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("Add", "a", a));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Add", "b", b));
    FSDPD_RETURN_IF_ERROR(CheckIndex("add", count));
    const uint32_t push[2] = {static_cast<uint32_t>(count), 0u};
    return Dispatch(Vk(out).half ? elementwise_half_ : elementwise_, {&a, &b, &out}, push,
                    GridStride(count), 1);
  }
  absl::Status TokenNll(Buffer& logits, Buffer& targets, int64_t rows, int64_t vocab,
                        Buffer& nll) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("TokenNll", "the logits", logits));
    FSDPD_RETURN_IF_ERROR(RequireFp32("TokenNll", "the targets", targets));
    FSDPD_RETURN_IF_ERROR(RequireFp32("TokenNll", "nll", nll));
    FSDPD_RETURN_IF_ERROR(CheckIndex("log-softmax", rows * vocab));
    const uint32_t push[2] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(vocab)};
    auto [x_groups, y_groups] = RowGrid(rows);
    return Dispatch(token_nll_, {&logits, &targets, &nll}, push, x_groups, y_groups);
  }

  absl::Status Finish() override { return context_->Finish(); }

 private:
  absl::StatusOr<std::unique_ptr<VulkanBuffer>> CreateBuffer(VkDeviceSize bytes, bool host_visible,
                                                             uint32_t memory_type = UINT32_MAX) {
    return context_->CreateBuffer(bytes, host_visible, memory_type);
  }
  // Builds candidates[i].pipeline from shaders[i] for every i, several at once (the driver
  // compiles each shader then: VulkanContext::MakePipelines), and returns the candidates whose
  // pipeline was built, in order; the first refusal's message goes to *refused where given.
  template <typename Candidate>
  std::vector<Candidate> BuildEach(std::vector<Candidate> candidates,
                                   const std::vector<Shader>& shaders, uint32_t bindings,
                                   uint32_t push_bytes, int threads, std::string* refused) {
    std::vector<VulkanContext::PipelineRequest> requests;
    for (size_t i = 0; i < candidates.size(); ++i) {
      requests.push_back({shaders[i], bindings, push_bytes, &candidates[i].pipeline});
    }
    const std::vector<absl::Status> made = context_->MakePipelines(requests, threads);
    std::vector<Candidate> built;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (made[i].ok()) {
        built.push_back(candidates[i]);
        continue;
      }
      DestroyPipeline(&candidates[i].pipeline);
      if (refused != nullptr && refused->empty()) *refused = std::string(made[i].message());
    }
    return built;
  }
  absl::Status MakePipeline(Shader shader, uint32_t bindings, uint32_t push_bytes, Pipeline* out) {
    return context_->MakePipeline(shader, bindings, push_bytes, out);
  }
  void DestroyPipeline(Pipeline* pipeline) { context_->DestroyPipeline(pipeline); }
  absl::Status Dispatch(const Pipeline& pipeline, std::initializer_list<Buffer*> buffers,
                        const void* push, uint32_t x_groups, uint32_t y_groups) {
    return context_->Dispatch(pipeline, buffers, push, x_groups, y_groups);
  }

  // The checks both attention ops make (fp32 buffers, head_dim within the shaders' limit, qkv's
  // `rows` rows within 32-bit indices, a workgroup row per (batch, head)); head_dim.
  absl::StatusOr<int64_t> CheckAttention(const char* op, Buffer& qkv, Buffer& out, int64_t batch,
                                         int64_t rows, int64_t heads, int64_t dim) const {
    FSDPD_RETURN_IF_ERROR(RequireFp32(op, "qkv", qkv));
    FSDPD_RETURN_IF_ERROR(RequireFp32(op, "out", out));
    const int64_t head_dim = dim / heads;
    if (head_dim > kMaxAttentionHeadDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("attention head_dim ", head_dim, " (dim ", dim, " / heads ", heads,
                       ") exceeds the shader's limit of ", kMaxAttentionHeadDim));
    }
    FSDPD_RETURN_IF_ERROR(CheckIndex("attention qkv", rows * 3 * dim));
    if (batch * heads > context_->limits().maxComputeWorkGroupCount[1]) {
      return absl::InvalidArgumentError(absl::StrCat("attention: batch × heads = ", batch * heads,
                                                     " exceeds the device's workgroup limit"));
    }
    return head_dim;
  }
  absl::Status CheckIndex(const char* what, int64_t elements) const {
    if (elements >= (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", elements,
                       " elements exceed the shaders' 32-bit indices; use a smaller batch"));
    }
    return absl::OkStatus();
  }
  uint32_t GridStride(int64_t count) const {
    const int64_t groups = std::max<int64_t>(1, (count + 255) / 256);
    return static_cast<uint32_t>(std::min<int64_t>(
        groups, std::min<uint32_t>(context_->limits().maxComputeWorkGroupCount[0], 65535)));
  }
  // A host-visible buffer of at least `bytes` for one host copy (WriteFloats, ReadFloats). Up to
  // kKeptStagingBytes it is kept and reused: decoding reads a token's logits back every token,
  // and a buffer allocated, mapped and freed each time cost the host more than the copy. A larger
  // one (a whole batch's logits) is made for the one copy and held by *one_off.
  absl::StatusOr<VulkanBuffer*> Staging(VkDeviceSize bytes,
                                        std::unique_ptr<VulkanBuffer>* one_off) {
    if (bytes > kKeptStagingBytes) {
      FSDPD_ASSIGN_OR_RETURN(*one_off, CreateBuffer(bytes, true));
      return one_off->get();
    }
    if (staging_ == nullptr || staging_->bytes < bytes) {
      staging_.reset();
      FSDPD_ASSIGN_OR_RETURN(staging_, CreateBuffer(bytes, true));
    }
    return staging_.get();
  }
  // attention_decode.comp's per-slice results, at least `floats` of them. A larger buffer
  // replaces the old one only once the commands recorded (which may read it) have run; it
  // doubles, so that decoding a token at a time, whose slices grow by one every
  // kDecodeAttentionSplit tokens, seldom waits for that.
  absl::StatusOr<VulkanBuffer*> DecodePartials(int64_t floats) {
    const auto bytes = static_cast<VkDeviceSize>(floats) * 4;
    if (decode_partials_ == nullptr || decode_partials_->bytes < bytes) {
      FSDPD_RETURN_IF_ERROR(Finish());
      const VkDeviceSize held = decode_partials_ == nullptr ? 0 : decode_partials_->bytes;
      decode_partials_.reset();
      FSDPD_ASSIGN_OR_RETURN(decode_partials_, CreateBuffer(std::max(bytes, 2 * held), false));
    }
    return decode_partials_.get();
  }
  std::pair<uint32_t, uint32_t> RowGrid(int64_t rows) const {
    const int64_t x = std::min<int64_t>(std::max<int64_t>(rows, 1), 65535);
    return {static_cast<uint32_t>(x), static_cast<uint32_t>((rows + x - 1) / x)};
  }

  std::unique_ptr<VulkanContext> context_;
  // Where the cooperative-matrix extension is enabled (VulkanContext::coop) and some of its
  // pipelines could be built.
  bool coop_ = false;
  std::string coop_refused_;  // why no cooperative-matrix pipeline could be built
  bool zero_copy_ = false;
  Pipeline embedding_, elementwise_, rmsnorm_, token_nll_, attention_;
  Pipeline attention_decode_;  // CausalAttentionAt of at most kDecodeAttentionRows rows
  Pipeline attention_decode_combine_;
  std::unique_ptr<VulkanBuffer> decode_partials_;  // DecodePartials
  std::unique_ptr<VulkanBuffer> staging_;          // Staging
  // Whether attention runs on cooperative matrices (head_dim a multiple of 16): attentions_.
  bool coop_attention_ = false;
  std::string attention_refused_;
  // The matmul's candidates (the cooperative-matrix blocks, or the tiled shader alone) and the
  // tuner that picks one per shape.
  struct MatmulPipeline {
    Pipeline pipeline;
    OutputBlock block;
    std::string name;
    // Reads x as fp16: an fp16 x (MatmulInput) is bound directly, an fp32 one goes through
    // ToHalf's scratch buffer first.
    bool half_input = false;
  };
  std::vector<MatmulPipeline> matmuls_;
  std::unique_ptr<MatmulTuner> tuner_;
  // Where attention runs on cooperative matrices: attention_coop.comp first, then the
  // workgroup-scope shaders (or the one VulkanOptions::attention pins), with the tuner that
  // picks one per (batch·heads, seq, head_dim, causal).
  struct AttentionPipeline {
    Pipeline pipeline;
    int64_t queries;       // a workgroup's
    int64_t max_head_dim;  // the largest head_dim the shader takes
    bool half_input;       // reads qkv through ToHalf's scratch buffer
    std::string name;
  };
  std::vector<AttentionPipeline> attentions_;
  std::unique_ptr<MatmulTuner> attention_tuner_;
  std::unique_ptr<VulkanBuffer> dummy_;
  Pipeline to_half_;                            // wherever fp16 is on
  std::unique_ptr<VulkanBuffer> half_scratch_;  // the fp16 x it writes
  // Whether MatmulInput buffers are fp16 (some matmul reads fp16 x), and the producers that
  // write them.
  bool half_inputs_ = false;
  Pipeline rmsnorm_half_, elementwise_half_;
  // Linear of at most kMatvecRows rows, with fp32 x and (where half_inputs_) fp16 x, in the
  // wide layout or the narrow one (VulkanOptions::matvec_layout).
  Pipeline matvec_, matvec_half_;
  bool matvec_wide_ = false;
  bool add_into_linear_ = true;  // VulkanOptions::add_into_linear
};

}  // namespace

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t exponent = (bits >> 23) & 0xFFu;
  uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (mantissa ? 0x200u : 0u));
  const int32_t half_exponent = static_cast<int32_t>(exponent) - 127 + 15;
  if (half_exponent >= 31) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow → inf
  if (half_exponent <= 0) {
    if (half_exponent < -10) return static_cast<uint16_t>(sign);  // underflow → ±0
    mantissa |= 0x800000u;  // subnormal half: shift the implicit one in, round to even
    const uint32_t shift = static_cast<uint32_t>(14 - half_exponent);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(half_exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into inf: right
  return static_cast<uint16_t>(sign | half);
}

absl::StatusOr<std::unique_ptr<VulkanBackend>> CreateVulkanBackend(const VulkanOptions& options) {
  auto backend = std::make_unique<VulkanBackendImpl>();
  FSDPD_RETURN_IF_ERROR(backend->Init(options));
  return std::unique_ptr<VulkanBackend>(std::move(backend));
}

}  // namespace fsdpd::edge
