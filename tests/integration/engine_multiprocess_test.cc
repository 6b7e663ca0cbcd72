// Separate fsdpd-train processes, Gloo over loopback, a FileKeyValueStore in a temp directory:
// world-size invariance, resume after a kill, bad inputs, a corrupt checkpoint, a dead peer.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formats/safetensors.h"
#include "gtest/gtest.h"
#include "tests/integration/engine_process_support.h"
#include "tests/unit/engine_test_support.h"

namespace fsdpd {
namespace {

using std::chrono::seconds;
using testing::RankRun;

constexpr char kTrainBinary[] = FSDPD_TRAIN_BINARY;

// Tiny, so each run takes well under a second per step even with four ranks on two cores.
std::string TinySpec(int64_t batch_size, int64_t steps, int64_t every_steps,
                     const std::string& extra_checkpoint = "") {
  return absl::StrCat(
      "name: engine-test\n"
      "model: {vocab: 64, dim: 32, layers: 2, heads: 4, ffn_mult: 2}\n"
      "data: {source: synthetic, seq_len: 8}\n"
      "train: {batch_size: ",
      batch_size, ", steps: ", steps,
      ", lr: 1.0e-2, seed: 7, grad_clip: 1.0}\n"
      "parallel: {world_size: 1, device: cpu, param_dtype: fp32}\n"
      "checkpoint: {every_steps: ",
      every_steps, ", keep: 3", extra_checkpoint, "}\n");
}

class EngineMultiProcessTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  std::string WriteSpec(const std::string& name, const std::string& text) {
    std::ofstream(Path(name)) << text;
    return Path(name);
  }

  // Starts every rank of a job and waits for all of them; returns their exit statuses.
  std::vector<int> RunJob(const std::string& spec, int world, const std::string& checkpoint_dir,
                          const std::string& label, int attempt = 0,
                          std::vector<std::vector<std::string>> per_rank_args = {},
                          seconds timeout = seconds(120)) {
    std::vector<RankRun> runs;
    for (int rank = 0; rank < world; ++rank) {
      std::vector<std::string> args = {"--spec",           spec,
                                       "--rank",           std::to_string(rank),
                                       "--world-size",     std::to_string(world),
                                       "--store-dir",      Path(label + "-store"),
                                       "--checkpoint-dir", checkpoint_dir,
                                       "--attempt",        std::to_string(attempt)};
      if (rank < static_cast<int>(per_rank_args.size())) {
        args.insert(args.end(), per_rank_args[rank].begin(), per_rank_args[rank].end());
      }
      runs.push_back(testing::Spawn(kTrainBinary, args,
                                    Path(absl::StrCat(label, ".", attempt, ".rank", rank)),
                                    {"FSDPD_COMM_TIMEOUT_SECONDS=10"}));
    }
    std::vector<int> statuses;
    for (const RankRun& run : runs) statuses.push_back(testing::WaitForExit(run, timeout));
    return statuses;
  }

  std::string Output(const std::string& label, int attempt, int rank, const char* kind) {
    return Path(absl::StrCat(label, ".", attempt, ".rank", rank, ".", kind));
  }

  std::string Explain(const std::string& label, int attempt, int world) {
    std::string text;
    for (int rank = 0; rank < world; ++rank) {
      absl::StrAppend(&text, "--- rank ", rank, " stderr:\n",
                      testing::ReadText(Output(label, attempt, rank, "err")));
    }
    return text;
  }

  testing::TempDir dir_;
};

TEST_F(EngineMultiProcessTest, SameJobAtWorldOneTwoAndFourGivesTheSameLossTrajectory) {
  // The global batch is batch_size × world_size sequences: 4 in every run.
  std::vector<std::vector<double>> trajectories;
  std::vector<std::vector<NamedTensor>> models;
  for (int world : {1, 2, 4}) {
    const std::string label = absl::StrCat("world", world);
    const std::string spec = WriteSpec(label + ".yaml", TinySpec(4 / world, 6, 0));
    const std::vector<int> statuses = RunJob(spec, world, Path(label + "-ckpt"), label);
    for (int status : statuses) ASSERT_EQ(status, 0) << Explain(label, 0, world);
    trajectories.push_back(testing::Losses(Output(label, 0, 0, "out")));
    ASSERT_EQ(trajectories.back().size(), 6u);
    // Every rank reports the same global loss.
    for (int rank = 1; rank < world; ++rank) {
      EXPECT_EQ(testing::Losses(Output(label, 0, rank, "out")), trajectories.back());
    }
    auto model = ReadSafetensors(Path(label + "-ckpt/model.safetensors"));
    ASSERT_TRUE(model.ok()) << model.status();
    models.push_back(std::move(*model));
  }
  // Only the order of floating-point sums differs between world sizes (the gradient average
  // and the loss mean), so fp32 agreement to a few ulps of the loss is expected.
  constexpr double kLossTolerance = 2e-5;
  for (size_t run = 1; run < trajectories.size(); ++run) {
    for (size_t step = 0; step < trajectories[0].size(); ++step) {
      EXPECT_NEAR(trajectories[run][step], trajectories[0][step], kLossTolerance)
          << "run " << run << " step " << step + 1;
    }
    // Weights are compared per tensor in relative L2. The key third of in_proj_bias is left out:
    // softmax is invariant to it, so its exact gradient is zero and what reaches AdamW is pure
    // rounding noise, which AdamW's division by √v turns into updates of up to lr.
    ASSERT_EQ(models[run].size(), models[0].size());
    for (size_t t = 0; t < models[0].size(); ++t) {
      ASSERT_EQ(models[run][t].name, models[0][t].name);
      const bool in_proj_bias = absl::EndsWith(models[0][t].name, "in_proj_bias");
      const size_t third = models[0][t].values.size() / 3;
      double difference = 0.0, reference = 0.0;
      for (size_t i = 0; i < models[0][t].values.size(); ++i) {
        if (in_proj_bias && i >= third && i < 2 * third) continue;
        const double delta = models[run][t].values[i] - models[0][t].values[i];
        difference += delta * delta;
        reference += static_cast<double>(models[0][t].values[i]) * models[0][t].values[i];
      }
      EXPECT_LT(std::sqrt(difference), 1e-3 * std::sqrt(reference) + 1e-6)
          << models[0][t].name << " run " << run;
    }
  }
  // And the trajectory is not trivially constant.
  EXPECT_NE(trajectories[0].front(), trajectories[0].back());
}

TEST_F(EngineMultiProcessTest, ResumeAfterAKillEndsWithTheSameWeightsAsAStraightRun) {
  const std::string spec = WriteSpec("resume.yaml", TinySpec(2, 20, 10));
  const std::vector<int> straight = RunJob(spec, 2, Path("straight-ckpt"), "straight");
  for (int status : straight) ASSERT_EQ(status, 0) << Explain("straight", 0, 2);

  // Both ranks die abruptly during step 12, after the checkpoint of step 10.
  const std::vector<int> killed = RunJob(spec, 2, Path("resumed-ckpt"), "resumed", 0,
                                         {{"--crash-at-step", "12"}, {"--crash-at-step", "12"}});
  for (int status : killed) EXPECT_EQ(status, 137) << Explain("resumed", 0, 2);
  const std::vector<int> resumed = RunJob(spec, 2, Path("resumed-ckpt"), "resumed", 1);
  for (int status : resumed) ASSERT_EQ(status, 0) << Explain("resumed", 1, 2);

  const std::vector<int64_t> steps = testing::Steps(Output("resumed", 1, 0, "out"));
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), 11) << "the run must continue after the checkpoint of step 10";
  EXPECT_NE(testing::ReadText(Output("resumed", 1, 0, "err"))
                .find("resumed from the checkpoint "
                      "of step 10"),
            std::string::npos);
  const std::vector<double> straight_losses = testing::Losses(Output("straight", 0, 0, "out"));
  const std::vector<double> resumed_losses = testing::Losses(Output("resumed", 1, 0, "out"));
  ASSERT_EQ(straight_losses.size(), 20u);
  ASSERT_EQ(resumed_losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(resumed_losses[i], straight_losses[10 + i]);

  auto expected = ReadSafetensors(Path("straight-ckpt/model.safetensors"));
  auto actual = ReadSafetensors(Path("resumed-ckpt/model.safetensors"));
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(actual->size(), expected->size());
  for (size_t t = 0; t < expected->size(); ++t) {
    EXPECT_EQ((*actual)[t].name, (*expected)[t].name);
    EXPECT_EQ((*actual)[t].values, (*expected)[t].values) << (*expected)[t].name;
  }
}

TEST_F(EngineMultiProcessTest, ACorruptCheckpointFallsBackToThePreviousOneOnEveryRank) {
  const std::string spec = WriteSpec("corrupt.yaml", TinySpec(2, 10, 5));
  const std::string checkpoints = Path("corrupt-ckpt");
  for (int status : RunJob(spec, 2, checkpoints, "corrupt")) {
    ASSERT_EQ(status, 0) << Explain("corrupt", 0, 2);
  }
  const std::vector<double> original = testing::Losses(Output("corrupt", 0, 0, "out"));
  const std::string step5 = checkpoints + "/step-00000005/rank-00001.bin";
  const std::string step10 = checkpoints + "/step-00000010/rank-00001.bin";
  ASSERT_TRUE(std::filesystem::exists(step5));
  ASSERT_TRUE(std::filesystem::exists(step10));
  const std::string step5_bytes = testing::ReadText(step5);
  {
    // Flip one byte in the middle of rank 1's newest shard.
    std::fstream file(step10, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(static_cast<std::streamoff>(std::filesystem::file_size(step10) / 2));
    char byte = 0;
    file.read(&byte, 1);
    file.seekp(static_cast<std::streamoff>(std::filesystem::file_size(step10) / 2));
    byte = static_cast<char>(byte ^ 0x5a);
    file.write(&byte, 1);
  }
  for (int status : RunJob(spec, 2, checkpoints, "corrupt", 1)) {
    ASSERT_EQ(status, 0) << Explain("corrupt", 1, 2);
  }
  // Both ranks went back to step 5 (rank 0's own step-10 shard was fine) and retrained the
  // same steps to the same losses.
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<int64_t> steps = testing::Steps(Output("corrupt", 1, rank, "out"));
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.front(), 6) << Explain("corrupt", 1, 2);
  }
  const std::vector<double> again = testing::Losses(Output("corrupt", 1, 0, "out"));
  ASSERT_EQ(again.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(again[i], original[5 + i]) << "step " << 6 + i;
  EXPECT_NE(testing::ReadText(Output("corrupt", 1, 1, "err")).find("skipping the checkpoint"),
            std::string::npos);
  // The checkpoint it fell back to was not damaged by the attempt.
  EXPECT_EQ(testing::ReadText(step5), step5_bytes);
}

TEST_F(EngineMultiProcessTest, AMismatchedInitFileIsAClearErrorNamingTheProblem) {
  // A file with one parameter of the wrong shape, one missing and one the model lacks.
  std::vector<NamedTensor> tensors;
  tensors.push_back({"embed.weight", {64, 16}, std::vector<float>(64 * 16, 0.1f)});
  tensors.push_back({"layers.9.attn.in_proj_weight", {2}, {1.0f, 2.0f}});
  ASSERT_TRUE(WriteSafetensors(Path("bad-init.safetensors"), tensors).ok());
  const std::string spec =
      WriteSpec("bad-init.yaml", TinySpec(2, 2, 0, ", init_from: " + Path("bad-init.safetensors")));
  const std::vector<int> statuses = RunJob(spec, 1, Path("bad-init-ckpt"), "bad-init");
  EXPECT_EQ(statuses[0], 2);
  const std::string error = testing::ReadText(Output("bad-init", 0, 0, "err"));
  EXPECT_NE(error.find("does not match the model"), std::string::npos) << error;
  EXPECT_NE(error.find("layers.9.attn.in_proj_weight"), std::string::npos) << error;
  EXPECT_NE(error.find("embed.weight is [64, 16], the model needs [64, 32]"), std::string::npos)
      << error;
  EXPECT_NE(error.find("missing"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(Path("bad-init-ckpt/model.safetensors")));
}

// fsdpd-train is where its spec enters, so it validates it there, once, with the flags'
// overrides (the trainer trusts the spec): every bad field is named, the exit status is 2, and no
// rank trains or creates its checkpoint folder.
TEST_F(EngineMultiProcessTest, AnInvalidSpecIsRefusedBeforeAnyRankStarts) {
  std::string text = TinySpec(2, 2, 0);
  text.replace(text.find("seed: 7"), 7, "seed: 7, lr_schedule: linear");
  text.replace(text.find("heads: 4"), 8, "heads: 5");
  const std::string spec = WriteSpec("invalid.yaml", text);
  const std::vector<int> statuses = RunJob(spec, 1, Path("invalid-ckpt"), "invalid");
  EXPECT_EQ(statuses[0], 2);
  const std::string error = testing::ReadText(Output("invalid", 0, 0, "err"));
  EXPECT_NE(error.find("invalid spec"), std::string::npos) << error;
  EXPECT_NE(error.find("train.lr_schedule: must be constant or cosine (got 'linear')"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("model.dim: must be divisible by model.heads"), std::string::npos) << error;
  EXPECT_TRUE(testing::ReadText(Output("invalid", 0, 0, "out")).empty());
  EXPECT_FALSE(std::filesystem::exists(Path("invalid-ckpt")));
  // The override is validated too: --steps past the bound is named.
  const std::vector<int> overridden =
      RunJob(WriteSpec("steps.yaml", TinySpec(2, 2, 0)), 1, Path("steps-ckpt"), "steps", 0,
             {{"--steps", "2000000000"}}, seconds(30));
  EXPECT_EQ(overridden[0], 2);
  EXPECT_NE(testing::ReadText(Output("steps", 0, 0, "err")).find("train.steps: must be between"),
            std::string::npos)
      << Explain("steps", 0, 1);
}

TEST_F(EngineMultiProcessTest, AnInitFileOutsideTheAllowedRootsIsRefused) {
  // A symlink inside the jail that leads out of it: the spec's syntax is fine (a `..` would be
  // refused by the validator already), so the worker's path policy must catch it.
  std::filesystem::create_directories(Path("jail"));
  std::filesystem::create_directory_symlink(Path(""), Path("jail/up"));
  const std::string spec =
      WriteSpec("escape.yaml", TinySpec(2, 2, 0, ", init_from: " + Path("jail/up/outside.st")));
  const std::vector<int> statuses =
      RunJob(spec, 1, Path("jail/ckpt"), "escape", 0, {{"--allowed-root", Path("jail")}});
  EXPECT_NE(statuses[0], 0);
  const std::string error = testing::ReadText(Output("escape", 0, 0, "err"));
  EXPECT_NE(error.find("checkpoint.init_from"), std::string::npos) << error;
  EXPECT_NE(error.find("PERMISSION_DENIED"), std::string::npos) << error;
}

TEST_F(EngineMultiProcessTest, AKilledPeerMakesTheOtherRankFailInsteadOfHanging) {
  const std::string spec = WriteSpec("peer.yaml", TinySpec(2, 200, 0));
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> statuses =
      RunJob(spec, 2, Path("peer-ckpt"), "peer", 0, {{}, {"--crash-at-step", "3"}}, seconds(60));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(statuses[1], 137);
  EXPECT_EQ(statuses[0], 1) << Explain("peer", 0, 2);
  // Within the 10 s communicator timeout (plus start-up), not the 60 s test deadline.
  EXPECT_LT(elapsed, seconds(30));
  const std::string error = testing::ReadText(Output("peer", 0, 0, "err"));
  EXPECT_NE(error.find("rank 0 of 2"), std::string::npos) << error;
}

}  // namespace
}  // namespace fsdpd
