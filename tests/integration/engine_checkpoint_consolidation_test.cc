// A committed checkpoint consolidated into whole tensors (worker/checkpoint/consolidate.h):
// bit for bit the trainer's own export of the same step at world sizes 1, 2 and 3 (the same
// fp32 master values, FSDP's padding cut off), the same file byte for byte; a missing,
// truncated or corrupt rank file is an error naming it; rank 0 tells each commit
// (TrainerHooks::on_checkpoint); and a job started from another job's checkpoint
// (checkpoint.init_from_job_uid) at another world size trains exactly as a job started from
// that checkpoint's export (checkpoint.init_from). Ranks run on threads, Gloo over loopback.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "formats/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/spec/job_spec.h"
#include "tests/unit/engine_test_support.h"
#include "worker/checkpoint/consolidate.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/model/model_config.h"
#include "worker/trainer.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

v1::JobSpec TinyJob(int world, int64_t steps, int64_t every_steps) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("consolidation");
  // Units whose sizes are not multiples of 2 or 3, so FSDP pads them.
  spec.mutable_model()->set_vocab(37);
  spec.mutable_model()->set_dim(12);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_ffn_mult(2);
  spec.mutable_model()->set_final_norm(true);
  spec.mutable_data()->set_seq_len(8);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_lr(1e-2);
  spec.mutable_parallel()->set_world_size(world);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_checkpoint()->set_every_steps(every_steps);
  spec.mutable_checkpoint()->set_keep(2);
  return spec;
}

struct TrainedRun {
  std::string exported_model_path;  // rank 0's
  std::vector<float> losses;        // rank 0's reports
  std::vector<v1::CheckpointCommitted> commits;
};

// Runs every rank of `spec` as job `uid` under `root` (its folder: root/uid).
TrainedRun Train(const v1::JobSpec& spec, const std::string& root, const std::string& uid) {
  const int world = spec.parallel().world_size();
  testing::TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  TrainedRun run;
  std::mutex mutex;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      RankContext context;
      context.job_id = uid;
      context.job_uid = uid;
      context.attempt = 1;
      context.rank = rank;
      context.world_size = world;
      context.store = store->get();
      context.checkpoint_dir = root + "/" + uid;
      TrainerHooks hooks;
      hooks.on_step = [&, rank](const v1::StepReport& report) {
        if (rank == 0) run.losses.push_back(report.loss());
      };
      hooks.on_checkpoint = [&](const v1::CheckpointCommitted& committed) {
        std::lock_guard<std::mutex> lock(mutex);
        run.commits.push_back(committed);
      };
      auto result = RunTrainer(spec, context, hooks);
      ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
      if (rank == 0) run.exported_model_path = result->exported_model_path;
    });
  }
  for (std::thread& thread : ranks) thread.join();
  return run;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

std::string StepDir(const std::string& job_dir, int64_t step) {
  return absl::StrFormat("%s/step-%08d", job_dir, step);
}

class ConsolidationTest : public ::testing::TestWithParam<int> {};

TEST_P(ConsolidationTest, EqualsTheTrainersExportBitForBit) {
  const int world = GetParam();
  testing::TempDir root;
  const v1::JobSpec spec = TinyJob(world, 4, 2);  // checkpoints at 2 and 4, the last step
  const TrainedRun run = Train(spec, root.path(), "uid-a");
  ASSERT_FALSE(run.exported_model_path.empty());
  const ModelConfig config = ModelConfigFromSpec(spec.model());

  auto consolidated = ConsolidateCheckpoint(root.path() + "/uid-a", 4, config);
  ASSERT_TRUE(consolidated.ok()) << consolidated.status();
  EXPECT_EQ(consolidated->world_size, world);
  EXPECT_EQ(consolidated->job_uid, "uid-a");
  auto exported = ReadSafetensors(run.exported_model_path);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ASSERT_EQ(consolidated->tensors.size(), exported->size());
  for (size_t index = 0; index < exported->size(); ++index) {
    const NamedTensor& mine = consolidated->tensors[index];
    const NamedTensor& theirs = (*exported)[index];
    EXPECT_EQ(mine.name, theirs.name);
    EXPECT_EQ(mine.shape, theirs.shape) << mine.name;
    ASSERT_EQ(mine.values.size(), theirs.values.size()) << mine.name;
    EXPECT_EQ(
        std::memcmp(mine.values.data(), theirs.values.data(), mine.values.size() * sizeof(float)),
        0)
        << mine.name << " differs";
  }
  // The same writer: the file is the trainer's, byte for byte (metadata and step included).
  const std::string path = root.path() + "/step-4.safetensors";
  auto size = ExportCheckpoint(root.path() + "/uid-a", 4, config, path);
  ASSERT_TRUE(size.ok()) << size.status();
  EXPECT_EQ(ReadBytes(path), ReadBytes(run.exported_model_path));
  EXPECT_EQ(*size, static_cast<int64_t>(std::filesystem::file_size(path)));

  // An earlier checkpoint differs from the final weights.
  auto earlier = ConsolidateCheckpoint(root.path() + "/uid-a", 2, config);
  ASSERT_TRUE(earlier.ok()) << earlier.status();
  EXPECT_NE(earlier->tensors.front().values, consolidated->tensors.front().values);

  // Rank 0 told each commit, once, with what is on disk.
  ASSERT_EQ(run.commits.size(), 2u);
  EXPECT_EQ(run.commits[0].step(), 2);
  EXPECT_EQ(run.commits[1].step(), 4);
  EXPECT_EQ(run.commits[1].world_size(), world);
  EXPECT_THAT(run.commits[1].committed_steps(), ::testing::ElementsAre(4, 2));
  int64_t on_disk = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(StepDir(root.path() + "/uid-a", 4))) {
    on_disk += static_cast<int64_t>(entry.file_size());
  }
  EXPECT_EQ(run.commits[1].size_bytes(), on_disk);
  EXPECT_GT(run.commits[1].unix_millis(), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ConsolidationTest, ::testing::Values(1, 2, 3));

// A checkpoint cancelled while its files are written is not committed, and not reported.
TEST(CheckpointReportTest, AnInterruptedCheckpointIsNotReported) {
  testing::TempDir root;
  std::atomic<bool> cancelled{false};
  std::vector<int64_t> reported;
  TrainerHooks hooks;
  hooks.cancelled = &cancelled;
  hooks.on_log = [&](const std::string&, const std::string& text) {
    if (text == "writing the checkpoint of step 4") cancelled = true;
  };
  hooks.on_checkpoint = [&](const v1::CheckpointCommitted& committed) {
    reported.push_back(committed.step());
  };
  RankContext context;
  context.job_id = "a";
  context.job_uid = "uid-a";
  context.checkpoint_dir = root.path() + "/uid-a";
  auto result = RunTrainer(TinyJob(1, 6, 2), context, hooks);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("cancelled while writing"));
  EXPECT_EQ(reported, (std::vector<int64_t>{2}));
}

class BrokenRankFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const v1::JobSpec spec = TinyJob(2, 2, 2);
    config_ = ModelConfigFromSpec(spec.model());
    Train(spec, root_.path(), "uid-a");
    job_dir_ = root_.path() + "/uid-a";
    rank_file_ = StepDir(job_dir_, 2) + "/rank-00001.bin";
    ASSERT_TRUE(std::filesystem::exists(rank_file_));
  }
  absl::Status Consolidate() { return ConsolidateCheckpoint(job_dir_, 2, config_).status(); }

  testing::TempDir root_;
  ModelConfig config_;
  std::string job_dir_;
  std::string rank_file_;
};

TEST_F(BrokenRankFileTest, MissingIsNamed) {
  std::filesystem::remove(rank_file_);
  const absl::Status status = Consolidate();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank-00001.bin is missing"));
  EXPECT_THAT(status.message(), HasSubstr(job_dir_));
}

TEST_F(BrokenRankFileTest, TruncatedIsNamed) {
  std::filesystem::resize_file(rank_file_, std::filesystem::file_size(rank_file_) - 7);
  const absl::Status status = Consolidate();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("size mismatch (rank-00001.bin"));
}

TEST_F(BrokenRankFileTest, CorruptIsNamed) {
  std::string bytes = ReadBytes(rank_file_);
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(rank_file_, std::ios::binary | std::ios::trunc) << bytes;
  const absl::Status status = Consolidate();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("checksum mismatch (CRC32C of rank-00001.bin"));
}

TEST_F(BrokenRankFileTest, AStepThatWasNotCommittedIsNotFound) {
  const absl::Status status = ConsolidateCheckpoint(job_dir_, 3, config_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("no complete checkpoint of step 3"));
}

TEST_F(BrokenRankFileTest, AnotherModelIsRefusedNamingTheBuffer) {
  ModelConfig other = config_;
  other.dim = 16;
  other.ffn_hidden = 32;
  const absl::Status status = ConsolidateCheckpoint(job_dir_, 2, other).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("buffer unit.0.param holds"));
}

// Job B starts from step 2 of job A (world 2) at world 3; job C starts from the export of that
// step (checkpoint.init_from) at world 3: the same weights, so the same losses, bit for bit.
TEST(InitFromJobTest, StartsFromTheOriginsCheckpointAtAnotherWorldSize) {
  testing::TempDir root;
  const v1::JobSpec origin = TinyJob(2, 4, 2);
  Train(origin, root.path(), "uid-a");
  const std::string exported = root.path() + "/a-step-2.safetensors";
  ASSERT_TRUE(
      ExportCheckpoint(root.path() + "/uid-a", 2, ModelConfigFromSpec(origin.model()), exported)
          .ok());

  v1::JobSpec from_job = TinyJob(3, 3, 0);
  from_job.mutable_checkpoint()->set_init_from_job_uid("uid-a");
  from_job.mutable_checkpoint()->set_init_from_step(2);
  const TrainedRun b = Train(from_job, root.path(), "uid-b");
  v1::JobSpec from_file = TinyJob(3, 3, 0);
  from_file.mutable_checkpoint()->set_init_from(exported);
  const TrainedRun c = Train(from_file, root.path(), "uid-c");
  const TrainedRun fresh = Train(TinyJob(3, 3, 0), root.path(), "uid-d");
  ASSERT_EQ(b.losses.size(), 3u);
  EXPECT_EQ(b.losses, c.losses);
  EXPECT_NE(b.losses.front(), fresh.losses.front());
  EXPECT_EQ(ReadBytes(b.exported_model_path), ReadBytes(c.exported_model_path));
}

TEST(InitFromJobTest, AMissingOriginFailsForGoodNamingIt) {
  testing::TempDir root;
  v1::JobSpec spec = TinyJob(1, 2, 0);
  spec.mutable_checkpoint()->set_init_from_job_uid("uid-gone");
  spec.mutable_checkpoint()->set_init_from_step(2);
  RankContext context;
  context.job_id = "b";
  context.job_uid = "uid-b";
  context.checkpoint_dir = root.path() + "/uid-b";
  auto result = RunTrainer(spec, context, TrainerHooks());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("checkpoint.init_from_job_uid"));
  EXPECT_THAT(result.status().message(), HasSubstr("uid-gone"));

  spec.mutable_checkpoint()->set_init_from_job_uid("../uid-a");
  result = RunTrainer(spec, context, TrainerHooks());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("holds a path separator"));
}

}  // namespace
}  // namespace fsdpd
