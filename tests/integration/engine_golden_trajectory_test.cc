// The engine against PyTorch: the loss trajectory of tests/golden/tiny (made by
// tests/golden/make_fixtures.py: fp32, CPU, deterministic) must be followed step by step.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/spec/job_spec.h"
#include "tests/support/test_specs.h"
#include "tests/unit/engine_test_support.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

TEST(EngineGoldenTrajectoryTest, FollowsPyTorchsLossesForTwentyAdamWSteps) {
  const std::string golden = testing::GoldenTinyDir();
  // The fixtures are committed (tests/golden/make_fixtures.py makes them): without them this
  // test would prove nothing, so their absence is a failure.
  ASSERT_TRUE(std::filesystem::exists(golden + "/losses.safetensors"))
      << "the PyTorch fixtures are missing from " << golden;
  const nlohmann::json config = testing::GoldenTinyConfig();
  auto losses = ReadSafetensors(golden + "/losses.safetensors");
  ASSERT_TRUE(losses.ok()) << losses.status();
  std::vector<float> expected;
  for (const NamedTensor& tensor : *losses) {
    if (tensor.name == "trajectory_losses") expected = tensor.values;
  }
  ASSERT_EQ(expected.size(), config["trajectory_steps"].get<size_t>());

  // The fixtures are fp32 on the CPU, so the parameters are too.
  v1::JobSpec spec =
      testing::GoldenTinySpec(config, "cpu", /*world=*/1, config["trajectory_steps"].get<int64_t>(),
                              config["trajectory_lr"].get<double>());
  spec.mutable_parallel()->set_param_dtype("fp32");

  testing::TempDir dir;
  RankContext context;
  context.job_id = "golden";
  context.checkpoint_dir = dir.path() + "/job";
  std::vector<double> actual;
  TrainerHooks hooks;
  hooks.on_step = [&](const v1::StepReport& report) {
    EXPECT_EQ(report.step(), static_cast<int64_t>(actual.size()) + 1);
    EXPECT_DOUBLE_EQ(report.lr(), config["trajectory_lr"].get<double>());
    EXPECT_GT(report.grad_norm(), 0.0);
    EXPECT_GT(report.tokens_per_second(), 0.0);
    EXPECT_GT(report.memory_peak_bytes(), 0);
    // The CPU backend caches nothing: what it holds is what is in use.
    EXPECT_GT(report.memory_reserved_bytes(), 0);
    EXPECT_EQ(report.memory_reserved_bytes(), report.memory_current_bytes());
    actual.push_back(report.loss());
  };
  auto result = RunTrainer(spec, context, hooks);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(actual.size(), expected.size());
  // fp32 everywhere on both sides; only summation order differs (BLAS, reductions), which
  // over 20 AdamW steps stays within a few ulps of the loss.
  constexpr double kTolerance = 1e-5;
  for (size_t step = 0; step < expected.size(); ++step) {
    EXPECT_NEAR(actual[step], expected[step], kTolerance) << "step " << step + 1;
  }
  EXPECT_LT(actual.back(), actual.front() - 0.3) << "the fixture's data is learnable";
  EXPECT_EQ(result->exported_model_path, dir.path() + "/job/model.safetensors");
  ASSERT_TRUE(std::filesystem::exists(result->exported_model_path));
  // The coordinator accepts an upload up to ExportedModelBytesLimit: a real export fits, with
  // every parameter in fp32.
  const auto bytes = static_cast<int64_t>(std::filesystem::file_size(result->exported_model_path));
  EXPECT_GT(bytes, 4 * ParameterCount(spec.model()));
  EXPECT_LE(bytes, ExportedModelBytesLimit(spec.model()));
}

}  // namespace
}  // namespace fsdpd
