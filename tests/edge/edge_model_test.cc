// A whole model end to end: the engine trains a small causal byte-level MiniLLM on the demo
// corpus (RunTrainer, the CPU engine, as a worker runs it) and exports it; fsdpd-edge's
// Vulkan backend (fp32 and fp16 paths, lavapipe, validation on) and its CPU backend then
// compute logits and perplexity, compared with the training engine's own forward
// (worker/model, MiniLLM::Logits) on the same weights.
//
// Tolerances on logits, relative to the largest |logit| (L) of the reference:
//  - edge cpu vs engine: the same kernels (kernels/cpu) in the same order: bit-identical.
//  - vulkan fp32: every shader stays within a few K·2^-24 of its reference (edge_kernels_test);
//    through 2 blocks of 5 GEMMs, attention and norms on K ≤ 128, errors add to ≤ 1e-4·L.
//  - vulkan fp16: weights and GEMM inputs are rounded to fp16 (2^-11 relative) at 5 GEMMs in
//    sequence per block plus the head: about 11·2·2^-11 ≈ 1% relative in the worst case,
//    2e-2·L with margin. (The norms and SiLU store the GEMMs' x in fp16 there: the same
//    rounding, done once by the producer instead of in the GEMM.)
// Perplexity: exp of the mean NLL; its relative error is the NLL's absolute error, bounded by
// the largest logit error twice (logsumexp and the target logit): 2·tolerance above.
// int8 weights (WeightFormat::kInt8): the CPU backend multiplies by the same dequantized weights
// the shaders read, so Vulkan against the CPU, both int8, takes the tolerances above (fp32:
// every op but the sums' order is the same; fp16: the fp16 path's roundings of the other weights
// and the matmul inputs). int8 against fp32 is the quantization's own error: perplexity within
// 1% (docs/edge.md, "int8 weights").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <vector>

#include "edge/argmax.h"
#include "edge/cpu_backend.h"
#include "edge/eval.h"
#include "edge/model.h"
#include "proto/spec/job_spec.h"
#include "tests/edge/edge_test_support.h"
#include "tests/support/temp_dir.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/minillm.h"
#include "worker/trainer.h"

namespace fsdpd::edge {
namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 32;

// The CPU reference and both Vulkan paths (fp32, and fp16 where the device has it), on which
// the generation tests run the same text.
struct GenerationBackends {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  std::unique_ptr<VulkanBackend> fp32 = testing::ValidatedVulkan(VulkanOptions::Precision::kFp32);
  std::unique_ptr<VulkanBackend> fp16 = testing::ValidatedVulkan(VulkanOptions::Precision::kAuto);

  std::vector<Backend*> All() const { return {cpu.get(), fp32.get(), fp16.get()}; }
  void ExpectNoValidationErrors() const {
    EXPECT_EQ(fp32->validation_errors(), 0) << fp32->last_validation_error();
    EXPECT_EQ(fp16->validation_errors(), 0) << fp16->last_validation_error();
  }
};

class EdgeModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new fsdpd::testing::TempDir();
    v1::JobSpec spec = DefaultJobSpec();
    spec.set_name("edge-model-test");
    spec.mutable_model()->set_vocab(256);
    spec.mutable_model()->set_dim(64);
    spec.mutable_model()->set_layers(2);
    spec.mutable_model()->set_heads(4);
    spec.mutable_model()->set_ffn_mult(2);
    spec.mutable_model()->set_causal(true);
    spec.mutable_model()->set_final_norm(true);
    spec.mutable_data()->set_source("text");
    spec.mutable_data()->set_path(std::string(FSDPD_DEFAULT_SOURCE_DIR) +
                                  "/examples/tiny_corpus.txt");
    spec.mutable_data()->set_seq_len(kSeq);
    spec.mutable_train()->set_batch_size(4);
    spec.mutable_train()->set_steps(40);
    spec.mutable_train()->set_lr(3e-3);
    spec.mutable_parallel()->set_world_size(1);
    spec.mutable_parallel()->set_device("cpu");
    spec.mutable_checkpoint()->set_every_steps(0);
    RankContext context;
    context.job_id = "edge";
    context.checkpoint_dir = directory_->path() + "/job";
    absl::StatusOr<TrainResult> result = RunTrainer(spec, context, {});
    ASSERT_TRUE(result.ok()) << result.status();
    model_path_ = new std::string(result->exported_model_path);
    final_loss_ = result->final_loss;
  }
  static void TearDownTestSuite() {
    delete directory_;
    delete model_path_;
  }

  void SetUp() override {
    ASSERT_NE(model_path_, nullptr);
    ASSERT_FALSE(model_path_->empty());
    absl::StatusOr<HostModel> model = LoadHostModel(*model_path_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    absl::StatusOr<std::vector<int32_t>> corpus =
        ReadTextTokens(std::string(FSDPD_DEFAULT_SOURCE_DIR) + "/examples/tiny_corpus.txt");
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    corpus_ = std::move(*corpus);
    tokens_.assign(corpus_.begin(), corpus_.begin() + kBatch * kSeq);
  }

  // The text Generate writes from `prompt` on `backend` with `weights`, appended to `texts`: of
  // the full length and equal to the tokens streamed as chosen.
  void GenerateText(Backend* backend, const std::vector<int32_t>& prompt, GenerateOptions options,
                    WeightFormat weights, std::vector<std::vector<int32_t>>* texts) {
    std::vector<int32_t> streamed;  // each token as it was chosen
    options.on_token = [&streamed](int32_t token) { streamed.push_back(token); };
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(model_, backend, 1, kSeq, weights);
    ASSERT_TRUE(runner.ok()) << runner.status();
    absl::StatusOr<std::vector<int32_t>> text = Generate(**runner, prompt, options);
    ASSERT_TRUE(text.ok()) << text.status();
    ASSERT_EQ(text->size(), prompt.size() + options.new_tokens);
    EXPECT_EQ(streamed, std::vector<int32_t>(text->begin() + prompt.size(), text->end()));
    texts->push_back(*text);
  }
  // GenerateText without and then with the qkv cache.
  void GenerateBothWays(Backend* backend, const std::vector<int32_t>& prompt,
                        GenerateOptions options, WeightFormat weights,
                        std::vector<std::vector<int32_t>>* texts) {
    for (bool kv_cache : {false, true}) {
      options.kv_cache = kv_cache;
      ASSERT_NO_FATAL_FAILURE(GenerateText(backend, prompt, options, weights, texts));
    }
  }

  // The training engine's forward (worker/model on its CPU backend) on the exported weights.
  std::vector<float> EngineLogits(const std::vector<int32_t>& tokens) {
    ModelConfig config;
    config.vocab = model_.config.vocab;
    config.dim = model_.config.dim;
    config.layers = model_.config.layers;
    config.heads = model_.config.heads;
    config.ffn_hidden = model_.config.ffn_mult * model_.config.dim;
    config.causal = model_.config.causal;
    config.final_norm = model_.config.final_norm;
    config.norm_eps = model_.config.norm_eps;
    CpuBackend backend;
    absl::StatusOr<std::unique_ptr<MiniLLM>> model =
        MiniLLM::Create(config, kBatch, kSeq, &backend);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return {};
    std::vector<std::vector<float>> flat;
    std::vector<Tensor> views;
    for (const UnitLayout& unit : (*model)->units()) {
      flat.emplace_back(static_cast<size_t>(unit.numel));
      for (const ParameterInfo& info : unit.parameters) {
        const std::vector<float>& values = model_.Tensor(info.name);
        std::copy(values.begin(), values.end(), flat.back().begin() + info.offset);
      }
    }
    for (auto& values : flat) {
      views.push_back(Tensor{values.data(), DType::kF32, {static_cast<int64_t>(values.size())}});
    }
    std::vector<int32_t> targets(tokens.size(), 0);
    EXPECT_TRUE((*model)->BeginStep(tokens.data(), targets.data()).ok());
    std::vector<float> logits;
    EXPECT_TRUE((*model)->Logits(views, &logits).ok());
    return logits;
  }

  std::vector<float> EdgeLogits(Backend* backend, WeightFormat weights = WeightFormat::kAuto) {
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(model_, backend, kBatch, kSeq, weights);
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return {};
    std::vector<float> logits;
    absl::Status status = (*runner)->Logits(tokens_, &logits);
    EXPECT_TRUE(status.ok()) << status;
    return logits;
  }

  // The engine's perplexity over the windows EvaluatePerplexity uses, from its logits.
  double EnginePerplexity() {
    const int64_t windows = (static_cast<int64_t>(corpus_.size()) - 1) / kSeq;
    const int64_t batches = windows / kBatch;
    double nll = 0.0;
    const int64_t vocab = model_.config.vocab;
    for (int64_t b = 0; b < batches; ++b) {
      std::vector<int32_t> inputs(kBatch * kSeq);
      std::copy(corpus_.begin() + b * kBatch * kSeq, corpus_.begin() + (b + 1) * kBatch * kSeq,
                inputs.begin());
      const std::vector<float> logits = EngineLogits(inputs);
      for (int64_t t = 0; t < kBatch * kSeq; ++t) {
        const float* row = logits.data() + t * vocab;
        const double best = *std::max_element(row, row + vocab);
        double sum = 0.0;
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - best);
        nll += std::log(sum) + best - row[corpus_[b * kBatch * kSeq + t + 1]];
      }
    }
    return std::exp(nll / static_cast<double>(batches * kBatch * kSeq));
  }

  static double MaxAbs(const std::vector<float>& values) {
    double largest = 0.0;
    for (float value : values) largest = std::max(largest, std::fabs(double(value)));
    return largest;
  }
  static double MaxError(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double largest = 0.0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      largest = std::max(largest, std::fabs(double(a[i]) - b[i]));
    }
    return largest;
  }

  static fsdpd::testing::TempDir* directory_;
  static std::string* model_path_;
  static double final_loss_;
  HostModel model_;
  std::vector<int32_t> corpus_;
  std::vector<int32_t> tokens_;
};

fsdpd::testing::TempDir* EdgeModelTest::directory_ = nullptr;
std::string* EdgeModelTest::model_path_ = nullptr;
double EdgeModelTest::final_loss_ = 0.0;

TEST_F(EdgeModelTest, TheExportCarriesTheModelConfigAndSafetensorsStillLoadsIt) {
  std::map<std::string, std::string> metadata;
  ASSERT_TRUE(ReadSafetensors(*model_path_, &metadata).ok());
  EXPECT_EQ(metadata["format"], "pt");
  EXPECT_EQ(metadata["architecture"], "fsdpd.MiniLLM");
  EXPECT_EQ(metadata["vocab"], "256");
  EXPECT_EQ(metadata["dim"], "64");
  EXPECT_EQ(metadata["layers"], "2");
  EXPECT_EQ(metadata["heads"], "4");
  EXPECT_EQ(metadata["ffn_mult"], "2");
  EXPECT_EQ(metadata["causal"], "true");
  EXPECT_EQ(metadata["final_norm"], "true");
  EXPECT_EQ(std::stod(metadata["norm_eps"]), 1.1920928955078125e-07);  // fp32 epsilon, exact
  EXPECT_EQ(metadata["step"], "40");
  // The Python package (what PyTorch's safetensors.torch.load_file uses underneath) reads the
  // file and its metadata; install_deps installs it, and its absence is a failure.
  const std::string script =
      "import sys, safetensors, safetensors.numpy as s\n"
      "t = s.load_file(sys.argv[1])\n"
      "m = safetensors.safe_open(sys.argv[1], 'np').metadata()\n"
      "assert t['layers.1.ffn.2.weight'].shape == (64, 128), t['layers.1.ffn.2.weight'].shape\n"
      "assert m['heads'] == '4' and m['causal'] == 'true' and m['format'] == 'pt', m\n";
  const std::string path = directory_->File("check.py");
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs(script.c_str(), file);
  std::fclose(file);
  EXPECT_EQ(std::system(("python3 " + path + " " + *model_path_).c_str()), 0)
      << "python3 with safetensors and numpy (scripts/install_deps.sh) must load the export";
}

TEST_F(EdgeModelTest, CpuBackendIsTheEnginesForwardBitForBit) {
  const std::vector<float> engine = EngineLogits(tokens_);
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  const std::vector<float> edge = EdgeLogits(cpu.get());
  ASSERT_EQ(edge.size(), engine.size());
  ASSERT_GT(MaxAbs(engine), 0.0);
  EXPECT_EQ(MaxError(edge, engine), 0.0);
}

TEST_F(EdgeModelTest, VulkanLogitsMatchTheEngineInFp32AndFp16) {
  const std::vector<float> engine = EngineLogits(tokens_);
  const double largest = MaxAbs(engine);
  ASSERT_GT(largest, 0.0);
  for (auto [precision, relative] : {std::pair{VulkanOptions::Precision::kFp32, 1e-4},
                                     std::pair{VulkanOptions::Precision::kFp16, 2e-2}}) {
    std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan(precision);
    ASSERT_NE(vulkan, nullptr);
    const std::vector<float> edge = EdgeLogits(vulkan.get());
    const double error = MaxError(edge, engine);
    EXPECT_LE(error, relative * largest) << vulkan->Describe() << ": largest |logit| " << largest;
    // fp16 must really have run in fp16: its error is well above fp32's. On the tiled matmul
    // (lavapipe) the norms and SiLU then write the projections' x in fp16 (MatmulInput).
    if (precision == VulkanOptions::Precision::kFp16) {
      EXPECT_GT(error, 1e-4 * largest);
      if (!vulkan->uses_cooperative_matrix()) {
        EXPECT_NE(vulkan->Describe().find("matmul inputs fp16"), std::string::npos)
            << vulkan->Describe();
      }
    }
    EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
  }
}

TEST_F(EdgeModelTest, PerplexityAgreesWithTheEngineAndShowsTheModelLearned) {
  const double reference = EnginePerplexity();
  // Trained on this corpus: well below a uniform guess over 256 bytes.
  EXPECT_LT(reference, 64.0);
  for (auto [precision, relative] : {std::pair{VulkanOptions::Precision::kFp32, 2e-4},
                                     std::pair{VulkanOptions::Precision::kFp16, 4e-2}}) {
    std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan(precision);
    ASSERT_NE(vulkan, nullptr);
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(model_, vulkan.get(), kBatch, kSeq);
    ASSERT_TRUE(runner.ok()) << runner.status();
    absl::StatusOr<Perplexity> result = EvaluatePerplexity(**runner, corpus_);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_NEAR(result->perplexity, reference, relative * reference) << vulkan->Describe();
    EXPECT_GT(result->tokens_per_second, 0.0);
    // The corpus makes several batches: the rate leaves the first (block tuning) out.
    ASSERT_GT(result->tokens, kBatch * kSeq);
    EXPECT_EQ(result->timed_tokens, result->tokens - kBatch * kSeq);
    EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
  }
}

TEST_F(EdgeModelTest, GreedyGenerationIsTheSameOnVulkanAndTheCpu) {
  const std::vector<int32_t> prompt(corpus_.begin(), corpus_.begin() + 10);
  GenerateOptions options;
  options.new_tokens = 12;
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan(VulkanOptions::Precision::kFp32);
  ASSERT_NE(vulkan, nullptr);
  std::vector<std::vector<int32_t>> texts;
  for (Backend* backend : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(vulkan.get())}) {
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(model_, backend, 1, kSeq);
    ASSERT_TRUE(runner.ok()) << runner.status();
    absl::StatusOr<std::vector<int32_t>> text = Generate(**runner, prompt, options);
    ASSERT_TRUE(text.ok()) << text.status();
    ASSERT_EQ(text->size(), prompt.size() + 12);
    texts.push_back(*text);
  }
  EXPECT_EQ(texts[0], texts[1]);
  EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
}

// Greedy decoding with the picks left on the device (ModelRunner::AppendGreedy, 16 tokens a
// wait) writes the text that reading every token's logits back writes: across a run of 16,
// to the window's end (a shorter run) and past it (the window slides and every token is a
// prefill), on the CPU and both Vulkan paths, each token streamed as it is read back.
TEST_F(EdgeModelTest, PicksLeftOnTheDeviceWriteTheTextOfPicksOnTheHost) {
  const std::vector<int32_t> prompt(corpus_.begin(), corpus_.begin() + 3);
  GenerationBackends backends;
  ASSERT_NE(backends.fp32, nullptr);
  ASSERT_NE(backends.fp16, nullptr);
  for (Backend* backend : backends.All()) {
    SCOPED_TRACE(backend->Describe());
    std::vector<std::vector<int32_t>> texts;
    for (bool on_device : {false, true}) {
      GenerateOptions options;
      options.new_tokens = kSeq + 4;  // 1 from the prefill, 16, 12 to the window's end, then 7
      options.pick_on_device = on_device;
      ASSERT_NO_FATAL_FAILURE(GenerateText(backend, prompt, options, WeightFormat::kAuto, &texts));
    }
    EXPECT_EQ(texts[0], texts[1]);
  }
  backends.ExpectNoValidationErrors();
}

// AppendGreedy leaves the cache that Append and the host's picks leave: the logits of the
// next token appended to each are the same bits (the same operations in the same order). A
// text alone would not show a misplaced cache row: this small model's greedy picks mostly
// follow the last token.
TEST_F(EdgeModelTest, GreedyStepsLeaveTheCacheThatAppendLeaves) {
  const std::vector<int32_t> prompt(corpus_.begin(), corpus_.begin() + 5);
  GenerationBackends backends;
  ASSERT_NE(backends.fp32, nullptr);
  ASSERT_NE(backends.fp16, nullptr);
  for (Backend* backend : backends.All()) {
    SCOPED_TRACE(backend->Describe());
    absl::StatusOr<std::unique_ptr<ModelRunner>> device =
        ModelRunner::Create(model_, backend, 1, kSeq);
    absl::StatusOr<std::unique_ptr<ModelRunner>> host =
        ModelRunner::Create(model_, backend, 1, kSeq);
    ASSERT_TRUE(device.ok() && host.ok());
    std::vector<float> logits, device_logits, host_logits;
    ASSERT_TRUE((*device)->Prefill(prompt, &logits).ok());
    ASSERT_TRUE((*host)->Prefill(prompt, &logits).ok());
    const int32_t token = corpus_[5];
    std::vector<int32_t> picked;
    ASSERT_TRUE((*device)->AppendGreedy(token, 7, &picked).ok());
    std::vector<int32_t> host_picked;
    int32_t next = token;
    for (int step = 0; step < 7; ++step) {
      ASSERT_TRUE((*host)->Append(next, &logits).ok());
      next = GreedyPick(logits.data(), static_cast<int64_t>(logits.size()));
      host_picked.push_back(next);
    }
    EXPECT_EQ(picked, host_picked);
    ASSERT_EQ((*device)->cached(), (*host)->cached());
    ASSERT_TRUE((*device)->Append(corpus_[20], &device_logits).ok());
    ASSERT_TRUE((*host)->Append(corpus_[20], &host_logits).ok());
    EXPECT_EQ(device_logits, host_logits);
  }
  backends.ExpectNoValidationErrors();
}

// AppendGreedy's refusals leave the sequence as it was: no room in the cache, a count out of
// range, a token past the vocabulary; before any prefill there is no sequence.
TEST_F(EdgeModelTest, GreedyStepsOutsideTheCacheAreRefused) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      ModelRunner::Create(model_, cpu.get(), 1, 8);
  ASSERT_TRUE(runner.ok()) << runner.status();
  std::vector<int32_t> picked;
  EXPECT_EQ((*runner)->AppendGreedy(1, 1, &picked).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<float> logits;
  ASSERT_TRUE((*runner)->Prefill({1, 2, 3}, &logits).ok());
  EXPECT_EQ((*runner)->AppendGreedy(1, 6, &picked).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*runner)->AppendGreedy(1, 0, &picked).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*runner)->AppendGreedy(1, ModelRunner::kGreedySteps + 1, &picked).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*runner)->AppendGreedy(256, 1, &picked).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*runner)->cached(), 3);
  ASSERT_TRUE((*runner)->AppendGreedy(1, 5, &picked).ok());
  EXPECT_EQ(picked.size(), 5u);
  EXPECT_EQ((*runner)->cached(), 8);
}

// The qkv cache changes the cost, not the predictions: greedy and top-k text with and without
// it, past the end of the window (the cache is refilled as the window slides), on the CPU and
// both Vulkan paths. The trained model's predictions have margins far above the logits'
// differences between the two (edge_decoding_test).
TEST_F(EdgeModelTest, TheQkvCacheGeneratesWhatAWholeForwardDoes) {
  const std::vector<int32_t> prompt(corpus_.begin(), corpus_.begin() + 10);
  GenerationBackends backends;
  ASSERT_NE(backends.fp32, nullptr);
  ASSERT_NE(backends.fp16, nullptr);
  for (Backend* backend : backends.All()) {
    for (int top_k : {1, 5}) {
      SCOPED_TRACE(::testing::Message() << backend->Describe() << ", top-k " << top_k);
      GenerateOptions options;
      options.new_tokens = kSeq + 8;  // the text outgrows the window
      options.top_k = top_k;
      options.seed = 7;
      std::vector<std::vector<int32_t>> texts;
      ASSERT_NO_FATAL_FAILURE(
          GenerateBothWays(backend, prompt, options, WeightFormat::kAuto, &texts));
      EXPECT_EQ(texts[0], texts[1]);
    }
  }
  backends.ExpectNoValidationErrors();
}

TEST_F(EdgeModelTest, Int8WeightsOnVulkanMatchTheCpuWithInt8Weights) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  const std::vector<float> reference = EdgeLogits(cpu.get(), WeightFormat::kInt8);
  const double largest = MaxAbs(reference);
  ASSERT_GT(largest, 0.0);
  // The quantization ran (the logits moved) and cost little.
  const double quantized = MaxError(reference, EdgeLogits(cpu.get()));
  EXPECT_GT(quantized, 0.0);
  EXPECT_LT(quantized, 0.05 * largest);
  for (auto [precision, relative] : {std::pair{VulkanOptions::Precision::kFp32, 1e-4},
                                     std::pair{VulkanOptions::Precision::kFp16, 2e-2}}) {
    std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan(precision);
    ASSERT_NE(vulkan, nullptr);
    const std::vector<float> edge = EdgeLogits(vulkan.get(), WeightFormat::kInt8);
    EXPECT_LE(MaxError(edge, reference), relative * largest) << vulkan->Describe();
    EXPECT_NE(vulkan->Describe().find("int8 weights: "), std::string::npos) << vulkan->Describe();
    EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
  }
}

// The int8 perplexity within 1% of fp32's on the CPU, and the same on Vulkan as on the CPU.
TEST_F(EdgeModelTest, Int8PerplexityIsWithinOnePercentOfFp32s) {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  auto perplexity = [&](Backend* backend, WeightFormat weights) {
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(model_, backend, kBatch, kSeq, weights);
    EXPECT_TRUE(runner.ok()) << runner.status();
    if (!runner.ok()) return 0.0;
    absl::StatusOr<Perplexity> result = EvaluatePerplexity(**runner, corpus_);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->perplexity : 0.0;
  };
  const double fp32 = perplexity(cpu.get(), WeightFormat::kAuto);
  const double int8 = perplexity(cpu.get(), WeightFormat::kInt8);
  EXPECT_LT(fp32, 64.0);
  EXPECT_NEAR(int8, fp32, 0.01 * fp32);
  // With x quantized per group of 32 before every int8 product too (what an int8 dot-product
  // matvec would compute; bench/RESULTS.md, call E13): the same 1% bound, and not the same
  // values as int8 weights alone (the option took effect).
  std::unique_ptr<Backend> int8_x_cpu = CreateCpuBackend(0, /*int8_activations=*/true);
  const double int8_x = perplexity(int8_x_cpu.get(), WeightFormat::kInt8);
  EXPECT_NEAR(int8_x, fp32, 0.01 * fp32);
  EXPECT_NE(int8_x, int8);
  std::printf("perplexity: fp32 %.6f, int8 weights %.6f, int8 weights and x %.6f\n", fp32, int8,
              int8_x);
  std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan(VulkanOptions::Precision::kFp16);
  ASSERT_NE(vulkan, nullptr);
  EXPECT_NEAR(perplexity(vulkan.get(), WeightFormat::kInt8), int8, 4e-2 * int8);
  EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
}

// The weights' device bytes: each linear layer's and the head's int8 values padded to 16 bytes
// and 2 bytes of scale per 32 inputs (padded to 4), the rest fp16 as before (padded to 4).
TEST_F(EdgeModelTest, Int8WeightsTakeAboutHalfTheBytesOfFp16) {
  std::unique_ptr<VulkanBackend> vulkan = testing::ValidatedVulkan(VulkanOptions::Precision::kFp16);
  ASSERT_NE(vulkan, nullptr);
  int64_t fp16_bytes = 0, int8_bytes = 0, linear_fp16 = 0, linear_int8 = 0;
  for (const ExportedTensorShape& tensor : ExportedModelTensors(model_.config)) {
    int64_t count = 1;
    for (int64_t d : tensor.shape) count *= d;
    const int64_t half = (count + 1) / 2 * 4;
    fp16_bytes += half;
    if (tensor.shape.size() != 2 || tensor.name == "embed.weight") {  // not a linear layer's
      int8_bytes += half;
      continue;
    }
    const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
    const int64_t int8 = (count + 15) / 16 * 16 + (2 * rows * ((cols + 31) / 32) + 3) / 4 * 4;
    int8_bytes += int8;
    linear_fp16 += half;
    linear_int8 += int8;
  }
  for (auto [weights, expected] :
       {std::pair{WeightFormat::kAuto, fp16_bytes}, std::pair{WeightFormat::kInt8, int8_bytes}}) {
    absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
        ModelRunner::Create(model_, vulkan.get(), 1, kSeq, weights);
    ASSERT_TRUE(runner.ok()) << runner.status();
    EXPECT_EQ((*runner)->weight_bytes(), expected);
  }
  // 1 + 2/32 bytes a weight against 2.
  EXPECT_NEAR(static_cast<double>(linear_int8) / static_cast<double>(linear_fp16), 1.0625 / 2,
              1e-3);
  EXPECT_EQ(vulkan->validation_errors(), 0) << vulkan->last_validation_error();
}

// Decoding on int8 weights: the prefill on the tiled matmul, each new token on matvec_int8.comp
// with the residual adds folded in. Greedy text on Vulkan (fp32 path) is the CPU's, and on both
// Vulkan paths the qkv cache generates what a whole forward does, past the window.
TEST_F(EdgeModelTest, Int8WeightsGenerateTheSameTextOnVulkanAndTheCpu) {
  const std::vector<int32_t> prompt(corpus_.begin(), corpus_.begin() + 10);
  GenerationBackends backends;
  ASSERT_NE(backends.fp32, nullptr);
  ASSERT_NE(backends.fp16, nullptr);
  GenerateOptions options;
  options.new_tokens = kSeq + 8;
  std::vector<std::vector<int32_t>> cached;
  for (Backend* backend : backends.All()) {
    SCOPED_TRACE(backend->Describe());
    std::vector<std::vector<int32_t>> texts;
    ASSERT_NO_FATAL_FAILURE(
        GenerateBothWays(backend, prompt, options, WeightFormat::kInt8, &texts));
    EXPECT_EQ(texts[0], texts[1]);
    cached.push_back(texts[1]);
  }
  EXPECT_EQ(cached[0], cached[1]);
  backends.ExpectNoValidationErrors();
}

}  // namespace
}  // namespace fsdpd::edge
