// The engine against transformers' LlamaForCausalLM: RunTrainer on the CPU in fp32, at one rank
// and sharded over two, follows the 20-step loss trajectory of tests/golden/llama_tiny and
// llama_tiny_tied (tests/golden/make_llama_fixtures.py) to MiniLLM's bound (1e-5,
// tests/integration/engine_golden_trajectory_test.cc), and rank 0 exports exactly the
// fixture's tensors under Hugging Face's names, with the model's llama config in the file's
// metadata.
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "formats/model_metadata.h"
#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_specs.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

struct LlamaCase {
  std::string fixture;
  int world;
};

class EngineLlamaGoldenTest : public ::testing::TestWithParam<LlamaCase> {};

TEST_P(EngineLlamaGoldenTest, FollowsTransformersLossesAndExportsItsNames) {
  const LlamaCase c = GetParam();
  const std::string golden = testing::GoldenLlamaDir(c.fixture);
  ASSERT_TRUE(std::filesystem::exists(golden + "/losses.safetensors"))
      << "the transformers fixtures are missing from " << golden;
  const nlohmann::json config = testing::GoldenLlamaConfig(c.fixture);
  std::vector<float> expected;
  auto losses = ReadSafetensors(golden + "/losses.safetensors");
  ASSERT_TRUE(losses.ok()) << losses.status();
  for (const NamedTensor& tensor : *losses) {
    if (tensor.name == "trajectory_losses") expected = tensor.values;
  }
  const int64_t steps = config.at("trajectory_steps");
  ASSERT_EQ(expected.size(), static_cast<size_t>(steps));
  // One rank takes the fixture's batch; two take half of it each, which the loader's window rule
  // makes the same global batch.
  const int64_t batch = config.at("batch");
  ASSERT_EQ(batch % c.world, 0);
  v1::JobSpec spec = testing::GoldenLlamaSpec(c.fixture, "cpu", c.world, steps,
                                              config.at("trajectory_lr").get<double>());
  spec.mutable_parallel()->set_param_dtype("fp32");
  spec.mutable_train()->set_batch_size(batch / c.world);

  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path() + "/store");
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<double> actual;
  std::string exported_path;
  std::mutex mutex;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < c.world; ++rank) {
    ranks.emplace_back([&, rank] {
      RankContext context;
      context.job_id = "llama-golden";
      context.rank = rank;
      context.world_size = c.world;
      context.checkpoint_dir = dir.path() + "/job";
      context.store = store->get();
      TrainerHooks hooks;
      if (rank == 0)
        hooks.on_step = [&](const v1::StepReport& report) { actual.push_back(report.loss()); };
      auto result = RunTrainer(spec, context, hooks);
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      std::lock_guard<std::mutex> lock(mutex);
      if (rank == 0) exported_path = result->exported_model_path;
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t step = 0; step < expected.size(); ++step) {
    EXPECT_NEAR(actual[step], expected[step], 1e-5) << "step " << step + 1;
  }
  EXPECT_LT(actual.back(), actual.front() - 0.3) << "the fixture's data is learnable";

  ASSERT_FALSE(exported_path.empty()) << "rank 0 exported nothing";
  std::map<std::string, std::string> metadata;
  auto exported = ReadSafetensors(exported_path, &metadata);
  ASSERT_TRUE(exported.ok()) << exported.status();
  auto init = ReadSafetensors(golden + "/init.safetensors");
  ASSERT_TRUE(init.ok()) << init.status();
  std::map<std::string, std::vector<int64_t>> exported_shapes, hugging_face_shapes;
  for (const NamedTensor& tensor : *exported) exported_shapes[tensor.name] = tensor.shape;
  for (const NamedTensor& tensor : *init) hugging_face_shapes[tensor.name] = tensor.shape;
  EXPECT_EQ(exported_shapes, hugging_face_shapes);
  EXPECT_EQ(exported_shapes.count("lm_head.weight"), config.at("tie_embeddings") ? 0u : 1u);
  EXPECT_EQ(metadata["format"], "pt");
  EXPECT_EQ(metadata["architecture"], kLlamaArchitecture);
  EXPECT_EQ(metadata["kv_heads"], std::to_string(config.at("kv_heads").get<int>()));
  EXPECT_EQ(metadata["ffn_dim"], std::to_string(config.at("ffn_dim").get<int>()));
  EXPECT_EQ(std::stod(metadata["rope_theta"]), config.at("rope_theta").get<double>());
  EXPECT_EQ(std::stod(metadata["norm_eps"]), config.at("norm_eps").get<double>());
  EXPECT_EQ(metadata["tie_embeddings"], config.at("tie_embeddings") ? "true" : "false");
  // MiniLLM's reader (fsdpd-edge's) refuses it by name rather than misreading it.
  auto as_minillm = ParseModelMetadata(metadata, exported_path);
  EXPECT_FALSE(as_minillm.ok());
  EXPECT_NE(as_minillm.status().message().find("fsdpd.Llama"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(FixturesAndWorlds, EngineLlamaGoldenTest,
                         ::testing::Values(LlamaCase{"llama_tiny", 1}, LlamaCase{"llama_tiny", 2},
                                           LlamaCase{"llama_tiny_tied", 1},
                                           LlamaCase{"llama_tiny_tied", 2}),
                         [](const ::testing::TestParamInfo<LlamaCase>& info) {
                           return std::string(info.param.fixture == "llama_tiny" ? "Untied"
                                                                                 : "Tied") +
                                  "World" + std::to_string(info.param.world);
                         });

}  // namespace
}  // namespace fsdpd
