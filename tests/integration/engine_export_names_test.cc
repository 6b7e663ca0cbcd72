// The exported model (ExportConsolidatedModel, worker/trainer_weights.cc) is a PyTorch
// state_dict: consolidated from the ranks' shards, it holds exactly the tensors of PyTorch's
// MiniLLM under PyTorch's names and shapes (tests/golden/tiny/init.safetensors, which
// tests/golden/make_fixtures.py saved from the PyTorch model), so `load_state_dict` and
// fsdpd-edge take it as it is.
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_specs.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

// name → shape of every tensor in a safetensors file.
std::map<std::string, std::vector<int64_t>> Shapes(const std::vector<NamedTensor>& tensors) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const NamedTensor& tensor : tensors) shapes[tensor.name] = tensor.shape;
  return shapes;
}

TEST(EngineExportNamesTest, TwoShardsExportPyTorchsStateDictNamesAndShapes) {
  const std::string golden = testing::GoldenTinyDir();
  auto pytorch = ReadSafetensors(golden + "/init.safetensors");
  ASSERT_TRUE(pytorch.ok()) << "the PyTorch fixtures are missing from " << golden << ": "
                            << pytorch.status();
  const nlohmann::json config = testing::GoldenTinyConfig();
  v1::JobSpec spec = testing::GoldenTinySpec(config, "cpu", /*world=*/2, /*steps=*/2,
                                             config["trajectory_lr"].get<double>());
  spec.mutable_parallel()->set_param_dtype("fp32");

  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path() + "/store");
  ASSERT_TRUE(store.ok()) << store.status();
  std::string exported_path;
  std::mutex mutex;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      RankContext context;
      context.job_id = "export-names";
      context.rank = rank;
      context.world_size = 2;
      context.checkpoint_dir = dir.path() + "/job";
      context.store = store->get();
      auto result = RunTrainer(spec, context, TrainerHooks{});
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      std::lock_guard<std::mutex> lock(mutex);
      if (rank == 0) exported_path = result->exported_model_path;
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_FALSE(exported_path.empty()) << "rank 0 exported nothing";

  std::map<std::string, std::string> metadata;
  auto exported = ReadSafetensors(exported_path, &metadata);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(Shapes(*exported), Shapes(*pytorch)) << "names and shapes of " << exported_path;
  EXPECT_EQ(metadata["format"], "pt") << "what safetensors' PyTorch loader expects";
  for (const NamedTensor& tensor : *exported) {
    int64_t numel = 1;
    for (int64_t size : tensor.shape) numel *= size;
    EXPECT_EQ(static_cast<int64_t>(tensor.values.size()), numel) << tensor.name;
  }
}

}  // namespace
}  // namespace fsdpd
