// fsdpd-edge as a user runs it: devices, eval and generate on lavapipe with validation, and
// every bad input answered by a clear message and exit status 1, never a crash.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/edge/edge_test_support.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace fsdpd::edge {
namespace {

using Outcome = fsdpd::testing::CommandOutcome;

Outcome RunEdge(const std::string& arguments, const std::string& environment = "") {
  return fsdpd::testing::RunCommand(environment + " " + FSDPD_EDGE_BINARY + " " + arguments);
}

void ExpectError(const Outcome& outcome, const std::string& message) {
  EXPECT_EQ(outcome.exit_code, 1) << outcome.output;
  EXPECT_NE(outcome.output.find(message), std::string::npos) << "expected '" << message << "' in:\n"
                                                             << outcome.output;
}

class EdgeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.vocab = 256;
    config_.dim = 64;
    config_.layers = 2;
    config_.heads = 4;
    config_.ffn_mult = 2;
    config_.causal = true;
    config_.final_norm = true;
    config_.norm_eps = 1e-6;
    tensors_ = testing::RandomModelTensors(config_, 7);
    model_ = dir_.File("model.safetensors");
    testing::WriteModel(model_, config_, tensors_);
    text_ = dir_.File("text.txt");
    std::ofstream(text_) << std::string(2000, 'a') + "the quick brown fox jumps over the lazy dog";
  }
  fsdpd::testing::TempDir dir_;
  ExportedModelConfig config_;
  std::vector<NamedTensor> tensors_;
  std::string model_, text_;
};

TEST_F(EdgeCliTest, DevicesListsLavapipeWithItsHeapsAndFp16Support) {
  const Outcome outcome = RunEdge("devices");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  // CI runs on lavapipe; a machine without it must fail here, loudly, not skip.
  EXPECT_NE(outcome.output.find("llvmpipe"), std::string::npos)
      << "lavapipe (mesa-vulkan-drivers) is not visible to the Vulkan loader:\n"
      << outcome.output;
  EXPECT_NE(outcome.output.find("heap 0:"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("shaderFloat16"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("cooperative matrices"), std::string::npos) << outcome.output;
}

TEST_F(EdgeCliTest, EvalReportsPerplexityTokensPerSecondAndThePathsThatRan) {
  const Outcome zero_copy =
      RunEdge("eval " + model_ + " --text " + text_ + " --seq 32 --batch 2 --validate");
  ASSERT_EQ(zero_copy.exit_code, 0) << zero_copy.output;
  EXPECT_NE(zero_copy.output.find("perplexity "), std::string::npos) << zero_copy.output;
  EXPECT_NE(zero_copy.output.find("tokens/s"), std::string::npos) << zero_copy.output;
  EXPECT_NE(zero_copy.output.find("fp16 weights"), std::string::npos) << zero_copy.output;
  EXPECT_NE(zero_copy.output.find("zero-copy"), std::string::npos) << zero_copy.output;
  const Outcome staged =
      RunEdge("eval " + model_ + " --text " + text_ + " --seq 32 --batch 2 --validate --staging");
  ASSERT_EQ(staged.exit_code, 0) << staged.output;
  EXPECT_NE(staged.output.find("through staging"), std::string::npos) << staged.output;
  // Same weights, same shaders: the same perplexity line.
  auto perplexity_line = [](const std::string& output) {
    const size_t start = output.find("perplexity ");
    return output.substr(start, output.find('\n', start) - start);
  };
  EXPECT_EQ(perplexity_line(zero_copy.output), perplexity_line(staged.output));
  const Outcome cpu =
      RunEdge("eval " + model_ + " --text " + text_ + " --seq 32 --batch 2 --backend cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(cpu.output.find("cpu (fp32 reference"), std::string::npos) << cpu.output;
}

// With the qkv cache (the default) and without it: the same text, and the rate line says which
// ran. 20 new tokens outgrow the 16-token window.
TEST_F(EdgeCliTest, GenerateContinuesAPromptGreedilyAndWithTopK) {
  // The text (stdout) into a file, the messages (stderr) into the outcome.
  auto run = [](const std::string& arguments, const std::string& text_path) {
    return fsdpd::testing::RunCommand(std::string("{ ") + FSDPD_EDGE_BINARY + " " + arguments +
                                      " > " + text_path + "; }");
  };
  // The generated text: stdout's last line (the model and backend lines come first).
  auto generated = [](const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    const std::string out(std::istreambuf_iterator<char>(file), {});
    const size_t start = out.find("\nthe quick");
    return start == std::string::npos ? out : out.substr(start + 1);
  };
  for (const std::string sampling : {"", " --top-k 5 --seed 3"}) {
    const std::string command = "generate " + model_ +
                                " --prompt 'the quick' --new-tokens 20 --seq 16 --validate" +
                                sampling;
    const Outcome cached = run(command, dir_.File("cached.txt"));
    ASSERT_EQ(cached.exit_code, 0) << cached.output;
    EXPECT_NE(cached.output.find("20 tokens in"), std::string::npos) << cached.output;
    EXPECT_NE(cached.output.find("tokens/s, qkv cache"), std::string::npos) << cached.output;
    const std::string text = generated(dir_.File("cached.txt"));
    EXPECT_EQ(text.rfind("the quick", 0), 0u) << text;
    EXPECT_EQ(text.size(), std::string("the quick").size() + 20 + 1) << text;  // and a newline
    const Outcome whole = run(command + " --no-kv-cache", dir_.File("whole.txt"));
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    EXPECT_NE(whole.output.find("a forward over the window per token"), std::string::npos)
        << whole.output;
    EXPECT_EQ(generated(dir_.File("whole.txt")), text);
    // Every token's logits read back and picked on the host: the device's picks.
    const Outcome host = run(command + " --pick-on-host", dir_.File("host.txt"));
    ASSERT_EQ(host.exit_code, 0) << host.output;
    EXPECT_EQ(generated(dir_.File("host.txt")), text);
    // Untimed generations first (--warmup): the same text, printed once.
    const Outcome warmed = run(command + " --warmup 2", dir_.File("warmed.txt"));
    ASSERT_EQ(warmed.exit_code, 0) << warmed.output;
    EXPECT_EQ(generated(dir_.File("warmed.txt")), text);
  }
  const Outcome refused = RunEdge("generate " + model_ + " --prompt hi --warmup -1");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--warmup"), std::string::npos) << refused.output;
}

// The pipelines built on one thread or on many: the same backend, the same text; the time the
// device took to open is reported; a thread count out of range is refused, naming the flag.
TEST_F(EdgeCliTest, PipelineThreadsChangeNothingButTheStartTime) {
  std::string texts[2];
  int slot = 0;
  for (const std::string threads : {"1", "16"}) {
    const std::string text_path = dir_.File("threads" + threads + ".txt");
    const Outcome outcome = fsdpd::testing::RunCommand(
        std::string("{ ") + FSDPD_EDGE_BINARY + " generate " + model_ +
        " --prompt 'the quick' --new-tokens 8 --seq 16 --validate --pipeline-threads " + threads +
        " > " + text_path + "; }");
    ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
    EXPECT_NE(outcome.output.find("device opened and pipelines built in"), std::string::npos)
        << outcome.output;
    // The generated text: stdout after the model, backend and placement lines (whose timing
    // varies).
    std::ifstream file(text_path, std::ios::binary);
    const std::string out(std::istreambuf_iterator<char>(file), {});
    const size_t start = out.find("\nthe quick");
    ASSERT_NE(start, std::string::npos) << out;
    texts[slot++] = out.substr(start + 1);
  }
  EXPECT_EQ(texts[0].size(), std::string("the quick").size() + 8 + 1) << texts[0];
  EXPECT_EQ(texts[0], texts[1]);
  const Outcome refused = RunEdge("generate " + model_ + " --prompt hi --pipeline-threads -1");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--pipeline-threads"), std::string::npos) << refused.output;
}

// --weights int8 quantizes the linear layers and the head on load: the placement line says so
// with fewer bytes, eval and generate run on Vulkan and the CPU; another value is refused, naming
// the flag and the choices.
TEST_F(EdgeCliTest, WeightsInt8QuantizesOnLoadAndABadValueIsRefused) {
  // The bytes the placement line gives: "weights placed in S s: N bytes …".
  auto weight_bytes = [](const std::string& output) -> long long {
    const size_t start = output.find(" s: ", output.find("weights placed in "));
    return start == std::string::npos ? -1 : std::stoll(output.substr(start + 4));
  };
  const std::string eval = "eval " + model_ + " --text " + text_ + " --seq 32 --validate";
  const Outcome fp16 = RunEdge(eval);
  ASSERT_EQ(fp16.exit_code, 0) << fp16.output;
  EXPECT_NE(fp16.output.find("as the backend stores weights"), std::string::npos) << fp16.output;
  const Outcome int8 = RunEdge(eval + " --weights int8");
  ASSERT_EQ(int8.exit_code, 0) << int8.output;
  EXPECT_NE(int8.output.find("int8 linear layers and head"), std::string::npos) << int8.output;
  EXPECT_NE(int8.output.find("int8 weights: matvec"), std::string::npos) << int8.output;
  EXPECT_NE(int8.output.find("perplexity "), std::string::npos) << int8.output;
  ASSERT_GT(weight_bytes(fp16.output), 0) << fp16.output;
  EXPECT_LT(weight_bytes(int8.output), weight_bytes(fp16.output) * 2 / 3) << int8.output;
  const Outcome generated = RunEdge("generate " + model_ +
                                    " --prompt 'the quick' --new-tokens 8 --seq 16 --validate "
                                    "--weights int8");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_NE(generated.output.find("tokens/s, qkv cache"), std::string::npos) << generated.output;
  const Outcome cpu =
      RunEdge("eval " + model_ + " --text " + text_ + " --seq 32 --backend cpu --weights int8");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_NE(cpu.output.find("on the host, int8 linear layers"), std::string::npos) << cpu.output;
  const Outcome refused = RunEdge(eval + " --weights int4");
  EXPECT_NE(refused.exit_code, 0);
  for (const char* part : {"--weights", "int4", "int8"}) {
    EXPECT_NE(refused.output.find(part), std::string::npos) << part << " in:\n" << refused.output;
  }
}

// --matvec picks decoding's matvec layout, which the backend line names, and each decodes the
// tokens asked for (edge_int8_test holds each layout's products to the CPU reference). Another
// value is refused, naming the flag and the choices.
TEST_F(EdgeCliTest, MatvecPicksTheLayoutAndABadValueIsRefused) {
  const std::string generate = "generate " + model_ +
                               " --prompt 'the quick' --new-tokens 8 --seq 16 --validate "
                               "--weights int8 --matvec ";
  for (const auto& [layout, named] : std::vector<std::pair<std::string, std::string>>{
           {"narrow", "int8 weights: matvec narrow,"},
           {"wide", "int8 weights: matvec wide,"},
           {"wide-words", "int8 weights: matvec wide words,"}}) {
    const Outcome outcome = RunEdge(generate + layout);
    ASSERT_EQ(outcome.exit_code, 0) << layout << ":\n" << outcome.output;
    EXPECT_NE(outcome.output.find(named), std::string::npos) << layout << ":\n" << outcome.output;
    EXPECT_NE(outcome.output.find("(tokens 2 to 8, "), std::string::npos) << layout << ":\n"
                                                                          << outcome.output;
  }
  const Outcome refused = RunEdge(generate + "diagonal");
  EXPECT_NE(refused.exit_code, 0);
  for (const char* part : {"--matvec", "diagonal", "wide-words"}) {
    EXPECT_NE(refused.output.find(part), std::string::npos) << part << " in:\n" << refused.output;
  }
}

TEST_F(EdgeCliTest, OpTimesPrintEachShadersGpuTimeAfterTheRun) {
  const Outcome generated =
      RunEdge("generate " + model_ + " --prompt 'the quick' --new-tokens 8 --seq 16 --op-times");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  for (const char* line : {"GPU time by operation, per token over 8: ", "ms of wall time",
                           "attention (decoding)", "rmsnorm", "matvec"}) {
    EXPECT_NE(generated.output.find(line), std::string::npos) << line << " in:\n"
                                                              << generated.output;
  }
  const Outcome evaluated = RunEdge("eval " + model_ + " --text " + text_ + " --seq 64 --op-times");
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_NE(evaluated.output.find("GPU time by operation, per token over"), std::string::npos)
      << evaluated.output;
  EXPECT_NE(evaluated.output.find("token_nll"), std::string::npos) << evaluated.output;
  ExpectError(RunEdge("eval " + model_ + " --text " + text_ + " --backend cpu --op-times"),
              "--op-times times the commands of a Vulkan device");
}

TEST_F(EdgeCliTest, NoVulkanDeviceIsAClearError) {
  // Both names of the loader's driver list: VK_DRIVER_FILES, where the caller set it (as the
  // GPU machine's scripts do), takes precedence over VK_ICD_FILENAMES.
  const std::string absent = dir_.File("no_such_icd.json");
  const std::string none = "VK_ICD_FILENAMES=" + absent + " VK_DRIVER_FILES=" + absent;
  ExpectError(RunEdge("devices", none),
              "no Vulkan driver found (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER)");
  ExpectError(RunEdge("eval " + model_ + " --text " + text_, none), "mesa-vulkan-drivers");
  ExpectError(RunEdge("eval " + model_ + " --text " + text_ + " --device 7"),
              "--device 7: there are");
}

TEST_F(EdgeCliTest, AMissingValidationLayerIsAClearError) {
  ExpectError(RunEdge("eval " + model_ + " --text " + text_ + " --validate",
                      "VK_LAYER_PATH=" + dir_.path() + " VK_ADD_LAYER_PATH="),
              "VK_LAYER_KHRONOS_validation is not installed");
}

TEST_F(EdgeCliTest, ATruncatedModelFileIsAClearError) {
  const std::string truncated = dir_.File("truncated.safetensors");
  std::filesystem::copy_file(model_, truncated);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(model_) / 2);
  ExpectError(RunEdge("eval " + truncated + " --text " + text_), "cannot read the model");
  std::filesystem::resize_file(truncated, 5);
  ExpectError(RunEdge("eval " + truncated + " --text " + text_), "too short");
  ExpectError(RunEdge("eval " + dir_.File("absent.safetensors") + " --text " + text_),
              "absent.safetensors");
}

TEST_F(EdgeCliTest, AFileWithoutConfigMetadataIsRefused) {
  const std::string bare = dir_.File("bare.safetensors");
  testing::WriteModel(bare, config_, tensors_, /*with_config=*/false);
  ExpectError(RunEdge("eval " + bare + " --text " + text_),
              "has no model config in its __metadata__");
}

TEST_F(EdgeCliTest, AModelThatDoesNotMatchItsConfigIsAClearError) {
  ExportedModelConfig wider = config_;
  wider.dim = 128;  // the tensors stay 64 wide
  const std::string mismatched = dir_.File("mismatched.safetensors");
  testing::WriteModel(mismatched, wider, tensors_);
  ExpectError(RunEdge("eval " + mismatched + " --text " + text_),
              "does not match its config metadata: tensor layers.0.norm1.weight is [64], the "
              "config needs [128]");
  std::vector<NamedTensor> missing(tensors_.begin() + 1, tensors_.end());
  testing::WriteModel(mismatched, config_, missing);
  ExpectError(RunEdge("eval " + mismatched + " --text " + text_),
              "tensor layers.0.norm1.weight is missing");
}

TEST_F(EdgeCliTest, AShapeTheShadersDoNotSupportIsAClearError) {
  ExportedModelConfig wide_heads = config_;
  wide_heads.dim = 256;
  wide_heads.heads = 1;  // head_dim 256 > the attention shader's 128
  wide_heads.layers = 1;
  const std::string path = dir_.File("wide.safetensors");
  testing::WriteModel(path, wide_heads, testing::RandomModelTensors(wide_heads, 3));
  ExpectError(RunEdge("eval " + path + " --text " + text_ + " --seq 8"),
              "head_dim 256 (dim 256 / heads 1) exceeds the shader's limit of 128");
  // The CPU reference has no such limit.
  const Outcome cpu = RunEdge("eval " + path + " --text " + text_ + " --seq 8 --backend cpu");
  EXPECT_EQ(cpu.exit_code, 0) << cpu.output;
}

TEST_F(EdgeCliTest, BadTokenInputIsAClearError) {
  const std::string odd = dir_.File("odd.bin");
  std::ofstream(odd) << "abc";
  ExpectError(RunEdge("eval " + model_ + " --tokens " + odd), "not a multiple of --token-bytes 2");
  const std::string large = dir_.File("large.bin");
  {
    std::ofstream out(large, std::ios::binary);
    for (uint16_t id = 0; id < 600; ++id) out.write(reinterpret_cast<const char*>(&id), 2);
  }
  ExpectError(RunEdge("eval " + model_ + " --tokens " + large + " --seq 32"),
              "outside the model's vocab of 256");
  ExpectError(RunEdge("eval " + model_ + " --text " + text_ + " --seq 4096"), "one batch needs");
  ExpectError(RunEdge("eval " + model_), "eval needs --text FILE or --tokens FILE");
}

TEST_F(EdgeCliTest, GenerateRefusesAModelWithoutTheCausalMask) {
  ExportedModelConfig full = config_;
  full.causal = false;
  const std::string path = dir_.File("full.safetensors");
  testing::WriteModel(path, full, tensors_);
  ExpectError(RunEdge("generate " + path + " --prompt hi"), "generate needs a causal model");
}

// A window far past the machine's memory is refused by either backend, never an abort. (Its
// first tensor, the token ids, is already too large, so nothing is allocated before.)
TEST_F(EdgeCliTest, AWindowTooLargeForTheDeviceIsAClearError) {
  ExpectError(RunEdge("generate " + model_ + " --prompt hi --seq 100000000000 --backend cpu"),
              "use a smaller batch or sequence");
  ExpectError(RunEdge("eval " + model_ + " --text " + text_ +
                      " --seq 100000000 --batch 1000 --backend cpu"),
              "use a smaller batch or sequence");
  ExpectError(RunEdge("generate " + model_ + " --prompt hi --seq 100000000000"),
              "use a smaller batch or sequence");
  // Every tensor within the device's limits, the window past lavapipe's 2 GiB heap: refused as
  // a whole before its tensors are allocated.
  ExpectError(RunEdge("generate " + model_ + " --prompt hi --seq 1000000"),
              "GiB allocated (its largest device-local heap holds");
}

TEST_F(EdgeCliTest, GenerateRefusesBadCounts) {
  ExpectError(RunEdge("generate " + model_ + " --prompt hi --new-tokens -3"),
              "--new-tokens must be ≥ 0 (got -3)");
  ExpectError(RunEdge("generate " + model_ + " --prompt hi --top-k 0"), "--top-k must be ≥ 1");
  ExpectError(RunEdge("generate " + model_ + " --prompt ''"),
              "generate needs --prompt TEXT or --prompt-ids IDS");
  ExpectError(RunEdge("generate " + model_ + " --prompt-ids ,"), "the prompt is empty");
}

// A model whose vocabulary is not bytes takes its prompt as ids and prints ids.
TEST_F(EdgeCliTest, GenerateTakesAPromptOfTokenIds) {
  ExportedModelConfig tokens = config_;
  tokens.vocab = 300;
  const std::string path = dir_.File("tokens.safetensors");
  testing::WriteModel(path, tokens, testing::RandomModelTensors(tokens, 8));
  const Outcome outcome =
      RunEdge("generate " + path + " --prompt-ids '299, 5 17' --new-tokens 4 --seq 16");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_NE(outcome.output.find("299 5 17 "), std::string::npos) << outcome.output;
  ExpectError(RunEdge("generate " + path + " --prompt-ids 300"),
              "outside the model's vocab of 300");
  ExpectError(RunEdge("generate " + path + " --prompt-ids '12 x'"),
              "'x' is not a token id (a non-negative integer)");
  ExpectError(RunEdge("generate " + path + " --prompt-ids -4"), "'-4' is not a token id");
}

}  // namespace
}  // namespace fsdpd::edge
