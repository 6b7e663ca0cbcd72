// The whole path a user takes: a real coordinator and two CPU workers train a causal byte-level
// model with FSDP (world size 2), `fsdpctl export` downloads it, and fsdpd-edge evaluates and
// generates from that file on lavapipe (validation on) and on its CPU reference.
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

// fsdpd-edge ARGS, its output and exit code.
CommandResult Edge(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {FSDPD_EDGE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, std::chrono::seconds(120));
}

double Perplexity(const CommandResult& result) {
  const size_t at = result.out.find("perplexity ");
  EXPECT_NE(at, std::string::npos) << result.out << result.err;
  if (at == std::string::npos) return -1.0;
  return std::stod(result.out.substr(at + 11));
}

TEST(EdgeClusterTest, AModelTrainedByTheClusterRunsOnFsdpdEdge) {
  Cluster cluster(2);
  ASSERT_TRUE(cluster.StartCoordinator());
  ASSERT_TRUE(cluster.StartWorkers());
  const std::string corpus = cluster.dir() + "/corpus.txt";
  std::filesystem::copy_file(std::string(FSDPD_DEFAULT_SOURCE_DIR) + "/examples/tiny_corpus.txt",
                             corpus);
  const std::string spec =
      "name: edge\n"
      "model: {vocab: 256, dim: 32, layers: 2, heads: 2, ffn_mult: 2, causal: true, "
      "final_norm: true}\n"
      "data: {source: text, path: " +
      corpus +
      ", seq_len: 32}\n"
      "train: {batch_size: 4, steps: 40, lr: 3.0e-3, seed: 1}\n"
      "parallel: {world_size: 2, device: cpu, param_dtype: fp32, reduce_dtype: fp32}\n"
      "checkpoint: {every_steps: 0}\n"
      "profile: {steps: 0}\n"
      "max_restarts: 0\n";
  const std::string id = cluster.SubmitJob(cluster.WriteSpec("edge", spec));
  ASSERT_FALSE(id.empty());
  nlohmann::json done = cluster.WaitForState(id, "SUCCEEDED", std::chrono::seconds(120));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << done.dump() << cluster.Logs();

  const std::string model = cluster.dir() + "/model.safetensors";
  ASSERT_FALSE(cluster.CtlJson({"export", id, "-o", model}).is_null());
  std::map<std::string, std::string> metadata;
  ASSERT_TRUE(ReadSafetensors(model, &metadata).ok());
  EXPECT_EQ(metadata["dim"], "32");
  EXPECT_EQ(metadata["causal"], "true");
  EXPECT_EQ(metadata["final_norm"], "true");
  EXPECT_EQ(metadata["step"], "40");

  const CommandResult vulkan = Edge({"eval", model, "--text", corpus, "--seq", "32", "--batch", "2",
                                     "--precision", "fp32", "--validate"});
  ASSERT_EQ(vulkan.exit_code, 0) << vulkan.out << vulkan.err;
  const CommandResult cpu =
      Edge({"eval", model, "--text", corpus, "--seq", "32", "--batch", "2", "--backend", "cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.out << cpu.err;
  const double reference = Perplexity(cpu);
  std::cout << "perplexity: cpu " << reference << ", vulkan fp32 " << Perplexity(vulkan) << "\n";
  // Trained: far below a uniform guess over 256 bytes. Vulkan fp32 within 2e-4 relative
  // (tests/edge/edge_model_test.cc derives the bound).
  EXPECT_LT(reference, 64.0);
  EXPECT_NEAR(Perplexity(vulkan), reference, 2e-4 * reference) << vulkan.out;

  const CommandResult text =
      Edge({"generate", model, "--prompt", "The ", "--new-tokens", "16", "--validate"});
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("The "), std::string::npos) << text.out;
}

}  // namespace
}  // namespace fsdpd::testing
