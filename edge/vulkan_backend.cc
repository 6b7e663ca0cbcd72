#include "edge/vulkan_backend.h"

#include <vulkan/vulkan.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "edge/matmul_tuner.h"
#include "edge/vulkan_context.h"
#include "edge/vulkan_op_checks.h"
#include "edge/vulkan_pipelines.h"
#include "formats/half.h"

namespace fsdpd::edge {
namespace {

constexpr int64_t kMatvecRows = 4;  // matvec.comp's ROWS
// CausalAttentionAt of at most this many rows runs attention_decode.comp (as Linear of at most
// kMatvecRows runs matvec.comp: decoding's rows).
constexpr int64_t kDecodeAttentionRows = 4;
// The keys a workgroup of attention_decode.comp takes (SPLIT in
// edge/shaders/attention_decode.glsl).
constexpr int64_t kDecodeAttentionSplit = 64;
// Host copies up to this size reuse one staging buffer (VulkanBackendImpl::Staging).
constexpr VkDeviceSize kKeptStagingBytes = 16 << 20;
// matvec.comp's COLUMNS (a workgroup's) in the narrow and the wide layout
// (edge/shaders/variants.cmake).
constexpr int64_t kMatvecColumns = 8;
constexpr int64_t kMatvecWideColumns = 4;
// The flags word of the matmul and matvec push constants: a bias, an add into out (matvec.comp's
// and matvec_int8.comp's), and, for the int8 shaders, which read the bias (and the norm weight)
// through uint words, fp16 ones (FLAG_BIAS_HALF in edge/shaders/int8.glsl).
// The norm and SiLU folded in (FLAG_NORM, FLAG_SILU: Backend::FusedLinear).
constexpr uint32_t kFlagBias = 1, kFlagAdd = 2, kFlagBiasHalf = 4, kFlagNorm = 8, kFlagSilu = 16;

// attention.comp's push constants; the matrix-unit attention shaders read the first six.
struct AttentionPush {
  uint32_t batch, seq, heads, head_dim, causal;
  float scale;
  uint32_t first;  // the position of the first query row (attention.comp only)
};
static_assert(sizeof(AttentionPush) == 28,
              "attention.comp's LAYOUT in edge/shaders/variants.cmake");

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
    decode_arrivals_.reset();
    staging_.reset();
    pipelines_.reset();
  }

  absl::Status Init(const VulkanOptions& options) {
    // An unknown block is refused before a device is opened.
    FSDPD_RETURN_IF_ERROR(CoopShader(options.coop_block).status());
    FSDPD_ASSIGN_OR_RETURN(context_, VulkanContext::Create(options));
    pipeline_threads_ = options.pipeline_threads;
    // Weights: zero-copy where one memory type is device-local and host-visible.
    zero_copy_ = !options.force_staging && context_->zero_copy_memory_type() != UINT32_MAX;
    FSDPD_ASSIGN_OR_RETURN(pipelines_, VulkanPipelines::Build(*context_, options));
    tuner_ = std::make_unique<MatmulTuner>(static_cast<int>(pipelines_->matmuls.size()));
    fuse_into_linear_ = options.fuse_into_linear;
    combine_in_attention_ = options.combine_in_attention;
    if (!pipelines_->attentions.empty()) {
      attention_tuner_ =
          std::make_unique<MatmulTuner>(static_cast<int>(pipelines_->attentions.size()));
    }
    // Bound where a shader's optional input is absent (a Linear without bias).
    FSDPD_ASSIGN_OR_RETURN(dummy_, CreateBuffer(16, false));
    return absl::OkStatus();
  }

  std::string Describe() const override {
    return absl::StrCat(
        "vulkan device ", context_->info().index, " '", context_->info().name, "' (",
        context_->info().type, "), ",
        context_->fp16() ? "fp16 weights and math, fp32 accumulation" : "fp32", ", matmul ",
        pipelines_->MatmulPath(), ", attention ", pipelines_->AttentionPath(), ", weights ",
        zero_copy_ ? "zero-copy (device-local host-visible heap)" : "uploaded through staging",
        pipelines_->half_inputs ? ", matmul inputs fp16" : "", ", decoding's matvec ",
        pipelines_->MatvecPath(),
        pipelines_->int8 ? absl::StrCat("; ", pipelines_->Int8Path()) : "");
  }
  int validation_errors() const override { return context_->validation_errors(); }
  std::string last_validation_error() const override { return context_->last_validation_error(); }
  bool uses_fp16() const override { return context_->fp16(); }
  bool uses_cooperative_matrix() const override { return pipelines_->coop; }
  bool zero_copy_weights() const override { return zero_copy_; }
  std::vector<OpTime> op_times() const override { return context_->op_times(); }
  std::vector<OpTime> host_times() const override { return context_->host_times(); }
  int64_t descriptor_sets_written() const override { return context_->descriptor_sets_written(); }
  void ResetOpTimes() override { context_->ResetOpTimes(); }

  absl::Status CheckRoom(double bytes) override { return context_->CheckRoom(bytes); }
  absl::StatusOr<std::unique_ptr<Buffer>> Weight(const float* values, int64_t count) override {
    // fp16 weights are padded to whole 4-byte words: the int8 shaders read a bias as uints.
    const VkDeviceSize bytes =
        context_->fp16() ? static_cast<VkDeviceSize>((count + 1) / 2) * 4 : count * 4;
    std::vector<uint16_t> halves;
    const void* source = values;
    if (context_->fp16()) {
      halves.resize(static_cast<size_t>(bytes / 2), 0);
      for (int64_t i = 0; i < count; ++i) halves[static_cast<size_t>(i)] = FloatToHalf(values[i]);
      source = halves.data();
    }
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           context_->CreateFilledBuffer(source, bytes, zero_copy_));
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  // One buffer: the int8 values, 4 to a word, padded to 16 bytes, then the fp16 scales
  // (edge/shaders/int8.glsl). The int8 pipelines are built with the first one.
  absl::StatusOr<std::unique_ptr<Buffer>> Int8Weight(const Int8Tensor& tensor) override {
    if (tensor.group != kInt8Group) {
      return absl::InvalidArgumentError(
          absl::StrCat("int8 weights of ", tensor.name, " in groups of ", tensor.group,
                       ": the Vulkan shaders read groups of ", kInt8Group));
    }
    const int64_t count = tensor.rows * tensor.cols;
    const int64_t scale_count = tensor.rows * tensor.groups_per_row();
    if (tensor.rows <= 0 || tensor.cols <= 0 ||
        static_cast<int64_t>(tensor.values.size()) != count ||
        static_cast<int64_t>(tensor.scales.size()) != scale_count) {
      return absl::InvalidArgumentError(absl::StrCat("int8 weights of ", tensor.name, ": ",
                                                     tensor.values.size(), " values and ",
                                                     tensor.scales.size(), " scales do not make a ",
                                                     tensor.rows, " × ", tensor.cols, " tensor"));
    }
    const int64_t value_bytes = (count + 15) / 16 * 16;
    const int64_t bytes = value_bytes + (2 * scale_count + 3) / 4 * 4;
    if (bytes >= (int64_t{1} << 32)) {
      return absl::InvalidArgumentError(absl::StrCat("int8 weights of ", tensor.name, ": ", bytes,
                                                     " bytes exceed the shaders' 32-bit indices"));
    }
    FSDPD_RETURN_IF_ERROR(pipelines_->BuildInt8(pipeline_threads_));
    if (int8_tuner_ == nullptr) {
      int8_tuner_ =
          std::make_unique<MatmulTuner>(static_cast<int>(pipelines_->int8_matmuls.size()));
    }
    std::vector<uint8_t> packed(static_cast<size_t>(bytes), 0);
    std::memcpy(packed.data(), tensor.values.data(), static_cast<size_t>(count));
    std::memcpy(packed.data() + value_bytes, tensor.scales.data(),
                static_cast<size_t>(scale_count) * sizeof(uint16_t));
    FSDPD_ASSIGN_OR_RETURN(
        std::unique_ptr<VulkanBuffer> buffer,
        context_->CreateFilledBuffer(packed.data(), static_cast<VkDeviceSize>(bytes), zero_copy_));
    buffer->int8_rows = tensor.rows;
    buffer->int8_cols = tensor.cols;
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  int64_t Bytes(Buffer& buffer) override { return static_cast<int64_t>(Vk(buffer).bytes); }
  absl::StatusOr<std::unique_ptr<Buffer>> Floats(int64_t count) override {
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           CreateBuffer(static_cast<VkDeviceSize>(count) * 4, false));
    return std::unique_ptr<Buffer>(std::move(buffer));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> MatmulInput(int64_t count) override {
    if (!pipelines_->half_inputs) return Floats(count);
    // Whole 4-byte words, as fp16 weights: matvec_int8.comp reads an fp16 x as uints.
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<VulkanBuffer> buffer,
                           CreateBuffer(static_cast<VkDeviceSize>((count + 1) / 2) * 4, false));
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

  absl::Status ReadInts(Buffer& buffer, int32_t* values, int64_t count) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("ReadInts", "the buffer", buffer));
    const VkDeviceSize bytes = static_cast<VkDeviceSize>(count) * 4;
    if (count < 0 || bytes > Vk(buffer).bytes || Vk(buffer).mapped == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReadInts of ", count, " ids from a buffer of ", Vk(buffer).bytes / 4,
          Vk(buffer).mapped == nullptr ? " that the host cannot read (not from Ints)" : ""));
    }
    FSDPD_RETURN_IF_ERROR(Finish());
    std::memcpy(values, Vk(buffer).mapped, bytes);
    return absl::OkStatus();
  }

  absl::Status Embedding(Buffer& table, Buffer& tokens, int64_t count, int64_t dim,
                         Buffer& out) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("Embedding", "the table", table));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Embedding", "the token ids", tokens));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Embedding", "out", out));
    FSDPD_RETURN_IF_ERROR(CheckIndex("embedding", count * dim));
    const uint32_t push[2] = {static_cast<uint32_t>(count), static_cast<uint32_t>(dim)};
    return Dispatch(pipelines_->embedding, {&table, &tokens, &out}, push,
                    GridStride(context_->limits(), count * dim), 1);
  }
  absl::Status RmsNorm(Buffer& x, Buffer& weight, int64_t rows, int64_t dim, double eps,
                       Buffer& out) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("RmsNorm", "x", x));
    FSDPD_RETURN_IF_ERROR(RequireFp32("RmsNorm", "the weight", weight));
    FSDPD_RETURN_IF_ERROR(RequireNotInt8("RmsNorm", "out", out));
    FSDPD_RETURN_IF_ERROR(CheckIndex("rmsnorm", rows * dim));
    struct {
      uint32_t rows, dim;
      float eps;
    } push{static_cast<uint32_t>(rows), static_cast<uint32_t>(dim), static_cast<float>(eps)};
    auto [x_groups, y_groups] = RowGrid(rows);
    return Dispatch(Vk(out).half ? pipelines_->rmsnorm_half : pipelines_->rmsnorm,
                    {&x, &weight, &out}, &push, x_groups, y_groups);
  }
  absl::Status Linear(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows, int64_t in_features,
                      int64_t out_features, Buffer& out) override {
    return LinearWith(x, weight, bias, rows, in_features, out_features, out, LinearFusion{});
  }
  bool FusesIntoLinear(int64_t rows) const override {
    return fuse_into_linear_ && rows <= kMatvecRows;
  }
  absl::Status FusedLinear(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows,
                           int64_t in_features, int64_t out_features, Buffer& out,
                           const LinearFusion& fusion) override {
    if (!FusesIntoLinear(rows)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "FusedLinear: ops are folded only into matvec.comp's products of up to ", kMatvecRows,
          " rows (decoding's), with VulkanOptions::fuse_into_linear; not ", rows));
    }
    if (fusion.norm != nullptr) {
      FSDPD_RETURN_IF_ERROR(RequireFp32("FusedLinear", "x (the residual a norm reads)", x));
      FSDPD_RETURN_IF_ERROR(RequireFp32("FusedLinear", "the norm weight", *fusion.norm));
      if (Vk(x).half) {
        return absl::InvalidArgumentError("FusedLinear: a folded RMSNorm reads an fp32 x");
      }
      if (Vk(*fusion.norm).bytes <
          static_cast<VkDeviceSize>(in_features) * (context_->fp16() ? 2 : 4)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "FusedLinear: the norm weight holds fewer than in_features (", in_features, ")"));
      }
    }
    const int64_t out_floats = static_cast<int64_t>(Vk(out).bytes / 4);
    if (fusion.out_offset < 0 || fusion.out_offset > out_floats - rows * out_features) {
      return absl::InvalidArgumentError(
          absl::StrCat("FusedLinear: ", rows, " × ", out_features, " outputs from float ",
                       fusion.out_offset, " fall outside out (", out_floats, " floats)"));
    }
    FSDPD_RETURN_IF_ERROR(CheckIndex("linear output", fusion.out_offset + rows * out_features));
    return LinearWith(x, weight, bias, rows, in_features, out_features, out, fusion);
  }
  // Linear, or with a fusion (matvec.comp only: FusedLinear checked it) FusedLinear.
  absl::Status LinearWith(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows,
                          int64_t in_features, int64_t out_features, Buffer& out,
                          const LinearFusion& fusion) {
    // int8 weights (Int8Weight) run their own pipelines, which read them in the shape placed.
    const bool int8 = Vk(weight).int8_cols > 0;
    if (int8 && (Vk(weight).int8_rows != out_features || Vk(weight).int8_cols != in_features)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Linear: the int8 weight is ", Vk(weight).int8_rows, " × ", Vk(weight).int8_cols,
          ", not out_features × in_features = ", out_features, " × ", in_features));
    }
    if (!int8) FSDPD_RETURN_IF_ERROR(RequireFp32("Linear", "the weight", weight));
    if (bias != nullptr) FSDPD_RETURN_IF_ERROR(RequireFp32("Linear", "the bias", *bias));
    FSDPD_RETURN_IF_ERROR(RequireNotInt8("Linear", "x", x));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Linear", "out", out));
    const std::vector<MatmulPipeline>& candidates =
        int8 ? pipelines_->int8_matmuls : pipelines_->matmuls;
    // An fp16 x (MatmulInput) is bound as it is, so only the pipelines that read fp16 x can
    // take it; an fp32 x reaches those through ToHalf: the fp16 weights' ones, and the int8
    // ones on cooperative matrices, whose every block rounds x to fp16 as it stages it anyway
    // (the tiled int8 shader multiplies an fp32 x as it is, and only its own build reads it).
    const bool half_x = Vk(x).half;
    if (half_x && std::none_of(candidates.begin(), candidates.end(),
                               [](const MatmulPipeline& matmul) { return matmul.half_input; })) {
      return absl::InvalidArgumentError(
          "Linear: x is fp16 but no matmul pipeline here reads fp16 x");
    }
    FSDPD_RETURN_IF_ERROR(CheckIndex("linear input", rows * in_features));
    FSDPD_RETURN_IF_ERROR(CheckIndex("linear weight", out_features * in_features));
    FSDPD_RETURN_IF_ERROR(CheckIndex("linear output", rows * out_features));
    // matvec.comp's push constants (the matmuls read the first four words): the flags, where
    // the rows go in out, the norm's eps.
    struct {
      uint32_t rows, out_features, in_features, flags, out_offset;
      float eps;
    } push{static_cast<uint32_t>(rows),
           static_cast<uint32_t>(out_features),
           static_cast<uint32_t>(in_features),
           (bias != nullptr ? kFlagBias : 0u) | (fusion.add ? kFlagAdd : 0u) |
               (fusion.norm != nullptr ? kFlagNorm : 0u) | (fusion.silu ? kFlagSilu : 0u) |
               (int8 && context_->fp16() ? kFlagBiasHalf : 0u),
           static_cast<uint32_t>(fusion.out_offset),
           static_cast<float>(fusion.eps)};
    static_assert(sizeof(push) == 24, "matvec.comp's LAYOUT in edge/shaders/variants.cmake");
    Buffer& bias_buffer = bias != nullptr ? *bias : *dummy_;
    Buffer& norm_buffer = fusion.norm != nullptr ? *fusion.norm : *dummy_;
    if (rows <= kMatvecRows) {
      // matvec.comp: a block of the matmul would compute BM rows for these few, and its grid
      // would hold a handful of workgroups.
      const int64_t columns = pipelines_->matvec_wide
                                  ? kMatvecWideColumns * pipelines_->subgroup_columns
                                  : kMatvecColumns;
      const int64_t groups = (out_features + columns - 1) / columns;
      const int64_t width =
          std::min<int64_t>(groups, context_->limits().maxComputeWorkGroupCount[0]);
      const int64_t height = (groups + width - 1) / width;
      if (height > context_->limits().maxComputeWorkGroupCount[1]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "linear of ", out_features, " outputs needs more workgroups than the device allows"));
      }
      const Pipeline& matvec =
          int8 ? (half_x ? pipelines_->matvec_int8_half : pipelines_->matvec_int8)
               : (half_x ? pipelines_->matvec_half : pipelines_->matvec);
      return Dispatch(matvec, {&x, &weight, &bias_buffer, &out, &norm_buffer}, &push,
                      static_cast<uint32_t>(width), static_cast<uint32_t>(height));
    }
    // Whether `matmul` can read this x: an fp16 x only a pipeline that reads fp16; off the
    // matrix units, an int8 pipeline only the x it was built for (no cast through ToHalf).
    const bool int8_exact = int8 && !pipelines_->int8_on_matrices;
    auto reads_x = [&](const MatmulPipeline& matmul) {
      return !(half_x && !matmul.half_input) && !(int8_exact && matmul.half_input != half_x);
    };
    auto dispatch = [&](const MatmulPipeline& matmul) -> absl::Status {
      FSDPD_ASSIGN_OR_RETURN(const auto grid, BlockGrid(context_->limits(), "linear", rows,
                                                        out_features, matmul.block));
      if (!reads_x(matmul)) {
        return absl::InternalError(absl::StrCat("Linear: the matmul '", matmul.name, "' reads ",
                                                matmul.half_input ? "fp16" : "fp32", " x, not ",
                                                half_x ? "fp16" : "fp32"));
      }
      Buffer* input = &x;
      if (matmul.half_input && !half_x) {
        FSDPD_ASSIGN_OR_RETURN(input, ToHalf(x, rows * in_features));
      }
      return Dispatch(matmul.pipeline, {input, &weight, &bias_buffer, &out}, &push, grid.first,
                      grid.second);
    };
    // A new shape times each candidate alone on these buffers (what is recorded so far is
    // submitted first); `out` is written again by the dispatch recorded below. A pipeline that
    // reads fp32 x never wins for an fp16 x.
    auto time = [&](int candidate) -> absl::StatusOr<double> {
      const MatmulPipeline& matmul = candidates[static_cast<size_t>(candidate)];
      if (!reads_x(matmul)) return std::numeric_limits<double>::infinity();
      return SecondsAlone([&] { return dispatch(matmul); });
    };
    MatmulTuner& tuner = int8 ? *int8_tuner_ : *tuner_;
    FSDPD_ASSIGN_OR_RETURN(
        const int chosen,
        tuner.Choose({rows, in_features, out_features, bias != nullptr, half_x}, time));
    return dispatch(candidates[static_cast<size_t>(chosen)]);
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
    FSDPD_RETURN_IF_ERROR(Dispatch(pipelines_->to_half, {&x, half_scratch_.get()}, &push,
                                   static_cast<uint32_t>(groups), 1));
    return half_scratch_.get();
  }
  std::vector<std::string> pipeline_statistics() const override { return pipelines_->Statistics(); }
  std::vector<std::string> matmul_choices() const override {
    std::vector<std::string> names;
    for (const MatmulPipeline& matmul : pipelines_->matmuls) names.push_back(matmul.name);
    std::vector<std::string> lines = tuner_->Describe(names);
    if (int8_tuner_ != nullptr) {
      std::vector<std::string> int8_names;
      for (const MatmulPipeline& matmul : pipelines_->int8_matmuls) {
        int8_names.push_back(matmul.name);
      }
      for (const std::string& line : int8_tuner_->Describe(int8_names)) lines.push_back(line);
    }
    if (attention_tuner_ != nullptr) {
      for (const auto& [key, index] : attention_tuner_->chosen()) {
        lines.push_back(absl::StrCat("attention, batch·heads ", key.rows, ", seq ", key.in_features,
                                     ", head_dim ", key.out_features, key.bias ? ", causal" : "",
                                     ": ",
                                     pipelines_->attentions[static_cast<size_t>(index)].name));
      }
    }
    return lines;
  }
  absl::Status Attention(Buffer& qkv, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                         bool causal, Buffer& out) override {
    FSDPD_ASSIGN_OR_RETURN(
        const int64_t head_dim,
        CheckAttention("Attention", qkv, out, batch, batch * seq, heads, dim, context_->limits()));
    const AttentionPush push = MakeAttentionPush(batch, seq, heads, head_dim, causal, 0);
    // A workgroup takes 64 queries of one (batch, head), or a workgroup-scope shader's BR.
    const bool matrix_units = pipelines_->coop_attention && head_dim % 16 == 0;
    if (!matrix_units) {
      return Dispatch(pipelines_->attention, {&qkv, &out}, &push,
                      static_cast<uint32_t>((seq + 63) / 64), static_cast<uint32_t>(batch * heads));
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
      const AttentionPipeline& attention = pipelines_->attentions[static_cast<size_t>(candidate)];
      if (attention.max_head_dim < head_dim) return std::numeric_limits<double>::infinity();
      return SecondsAlone([&] { return dispatch(attention); });
    };
    // The tuner's key, read back by matmul_choices(): batch·heads, seq, head_dim, causal.
    FSDPD_ASSIGN_OR_RETURN(const int chosen,
                           attention_tuner_->Choose({batch * heads, seq, head_dim, causal}, time));
    return dispatch(pipelines_->attentions[static_cast<size_t>(chosen)]);
  }
  // attention.comp with its queries at positions first… (the matrix-unit shaders have no
  // such offset; one query a step leaves them nothing to gain).
  absl::Status CausalAttentionAt(Buffer& qkv, int64_t first, int64_t rows, int64_t heads,
                                 int64_t dim, Buffer& out) override {
    FSDPD_ASSIGN_OR_RETURN(const int64_t head_dim,
                           CheckAttention("CausalAttentionAt", qkv, out, 1, first + rows, heads,
                                          dim, context_->limits()));
    const AttentionPush push = MakeAttentionPush(1, rows, heads, head_dim, true, first);
    if (rows <= kDecodeAttentionRows) {
      // attention_decode.comp: a workgroup a (slice of keys, row, head), each slice's softmax
      // and output then added by the last workgroup of its (row, head) to finish (or by
      // attention_decode_combine.comp, without combine_in_attention); the 64-query workgroups
      // below would run these rows on 4 invocations each, one after another through every key.
      const int64_t slices = (first + rows + kDecodeAttentionSplit - 1) / kDecodeAttentionSplit;
      FSDPD_ASSIGN_OR_RETURN(VulkanBuffer * partials,
                             DecodePartials(rows * heads * slices * (head_dim + 2)));
      if (combine_in_attention_) {
        FSDPD_ASSIGN_OR_RETURN(VulkanBuffer * arrivals, DecodeArrivals(rows * heads));
        return Dispatch(pipelines_->attention_decode_in_place, {&qkv, partials, &out, arrivals},
                        &push, static_cast<uint32_t>(slices), static_cast<uint32_t>(rows * heads));
      }
      FSDPD_RETURN_IF_ERROR(Dispatch(pipelines_->attention_decode, {&qkv, partials}, &push,
                                     static_cast<uint32_t>(slices),
                                     static_cast<uint32_t>(rows * heads)));
      return Dispatch(pipelines_->attention_decode_combine, {partials, &out}, &push,
                      static_cast<uint32_t>(rows * heads), 1);
    }
    return Dispatch(pipelines_->attention, {&qkv, &out}, &push,
                    static_cast<uint32_t>((rows + 63) / 64), static_cast<uint32_t>(heads));
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
    FSDPD_RETURN_IF_ERROR(RequireNotInt8("Silu", "out", out));
    FSDPD_RETURN_IF_ERROR(CheckIndex("silu", count));
    const uint32_t push[2] = {static_cast<uint32_t>(count), 1u};
    return Dispatch(Vk(out).half ? pipelines_->elementwise_half : pipelines_->elementwise,
                    {&x, &x, &out}, push, GridStride(context_->limits(), count), 1);
  }
  absl::Status Add(Buffer& a, Buffer& b, int64_t count, Buffer& out) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("Add", "a", a));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Add", "b", b));
    FSDPD_RETURN_IF_ERROR(RequireNotInt8("Add", "out", out));
    FSDPD_RETURN_IF_ERROR(CheckIndex("add", count));
    const uint32_t push[2] = {static_cast<uint32_t>(count), 0u};
    return Dispatch(Vk(out).half ? pipelines_->elementwise_half : pipelines_->elementwise,
                    {&a, &b, &out}, push, GridStride(context_->limits(), count), 1);
  }
  absl::Status TokenNll(Buffer& logits, Buffer& targets, int64_t rows, int64_t vocab,
                        Buffer& nll) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("TokenNll", "the logits", logits));
    FSDPD_RETURN_IF_ERROR(RequireFp32("TokenNll", "the targets", targets));
    FSDPD_RETURN_IF_ERROR(RequireFp32("TokenNll", "nll", nll));
    FSDPD_RETURN_IF_ERROR(CheckIndex("log-softmax", rows * vocab));
    const uint32_t push[2] = {static_cast<uint32_t>(rows), static_cast<uint32_t>(vocab)};
    auto [x_groups, y_groups] = RowGrid(rows);
    return Dispatch(pipelines_->token_nll, {&logits, &targets, &nll}, push, x_groups, y_groups);
  }

  absl::Status Argmax(Buffer& logits, int64_t vocab, Buffer& next, Buffer& history,
                      int64_t index) override {
    FSDPD_RETURN_IF_ERROR(RequireFp32("Argmax", "the logits", logits));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Argmax", "next", next));
    FSDPD_RETURN_IF_ERROR(RequireFp32("Argmax", "the history", history));
    FSDPD_RETURN_IF_ERROR(CheckArgmax(vocab, static_cast<int64_t>(Vk(logits).bytes / 4),
                                      static_cast<int64_t>(Vk(next).bytes / 4),
                                      static_cast<int64_t>(Vk(history).bytes / 4), index));
    FSDPD_RETURN_IF_ERROR(CheckIndex("argmax", vocab));
    const uint32_t push[2] = {static_cast<uint32_t>(vocab), static_cast<uint32_t>(index)};
    return Dispatch(pipelines_->argmax, {&logits, &next, &history}, push, 1, 1);
  }

  absl::Status Finish() override { return context_->Finish(); }

 private:
  absl::StatusOr<std::unique_ptr<VulkanBuffer>> CreateBuffer(VkDeviceSize bytes, bool host_visible,
                                                             uint32_t memory_type = UINT32_MAX) {
    return context_->CreateBuffer(bytes, host_visible, memory_type);
  }
  absl::Status Dispatch(const Pipeline& pipeline, std::initializer_list<Buffer*> buffers,
                        const void* push, uint32_t x_groups, uint32_t y_groups) {
    return context_->Dispatch(pipeline, buffers, push, x_groups, y_groups);
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
  // attention_decode.comp's counts of the slices done per (row, head) when it combines them in
  // place, at least `count`, zero between dispatches (each dispatch's last workgroup of a pair
  // sets its count back). Made zero through staging; a larger one waits for the commands
  // recorded, as DecodePartials does.
  absl::StatusOr<VulkanBuffer*> DecodeArrivals(int64_t count) {
    const auto bytes = static_cast<VkDeviceSize>(count) * 4;
    if (decode_arrivals_ == nullptr || decode_arrivals_->bytes < bytes) {
      FSDPD_RETURN_IF_ERROR(Finish());
      decode_arrivals_.reset();
      FSDPD_ASSIGN_OR_RETURN(decode_arrivals_, CreateBuffer(bytes, false));
      std::unique_ptr<VulkanBuffer> one_off;
      FSDPD_ASSIGN_OR_RETURN(VulkanBuffer * staging, Staging(bytes, &one_off));
      std::memset(staging->mapped, 0, bytes);
      FSDPD_RETURN_IF_ERROR(context_->CopyNow(*staging, *decode_arrivals_, bytes));
    }
    return decode_arrivals_.get();
  }
  std::unique_ptr<VulkanContext> context_;
  std::unique_ptr<VulkanPipelines> pipelines_;
  bool zero_copy_ = false;
  std::unique_ptr<VulkanBuffer> decode_partials_;  // DecodePartials
  std::unique_ptr<VulkanBuffer> decode_arrivals_;  // DecodeArrivals
  std::unique_ptr<VulkanBuffer> staging_;          // Staging
  // The tuners that pick a matmul candidate per shape and an attention one per (batch·heads,
  // seq, head_dim, causal), where there are several (VulkanPipelines::matmuls, attentions).
  std::unique_ptr<MatmulTuner> tuner_;
  std::unique_ptr<MatmulTuner> attention_tuner_;
  std::unique_ptr<MatmulTuner> int8_tuner_;  // the int8 weights' candidates, once built
  int pipeline_threads_ = 0;                 // VulkanOptions::pipeline_threads, for BuildInt8
  std::unique_ptr<VulkanBuffer> dummy_;
  std::unique_ptr<VulkanBuffer> half_scratch_;  // the fp16 x ToHalf writes
  bool fuse_into_linear_ = true;                // VulkanOptions::fuse_into_linear
  bool combine_in_attention_ = true;            // VulkanOptions::combine_in_attention
};

}  // namespace

const char* MatvecLayoutName(VulkanOptions::MatvecLayout layout) {
  switch (layout) {
    case VulkanOptions::MatvecLayout::kNarrow:
      return "narrow";
    case VulkanOptions::MatvecLayout::kWide:
      return "wide";
    case VulkanOptions::MatvecLayout::kWideWords:
      return "wide words";
    case VulkanOptions::MatvecLayout::kWide2:
      return "wide, 2 columns a subgroup";
    case VulkanOptions::MatvecLayout::kWide4:
      return "wide, 4 columns a subgroup";
    case VulkanOptions::MatvecLayout::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<std::unique_ptr<VulkanBackend>> CreateVulkanBackend(const VulkanOptions& options) {
  auto backend = std::make_unique<VulkanBackendImpl>();
  FSDPD_RETURN_IF_ERROR(backend->Init(options));
  return std::unique_ptr<VulkanBackend>(std::move(backend));
}

}  // namespace fsdpd::edge
