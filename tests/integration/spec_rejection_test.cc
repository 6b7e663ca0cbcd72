// Bad specs are refused with a message that names the field, and nothing is stored.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using ::testing::HasSubstr;

class SpecRejectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new Cluster(2);
    ASSERT_TRUE(cluster_->StartCoordinator());
    ASSERT_TRUE(cluster_->StartWorkers());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // Submits the spec, expects a failure whose message contains every fragment, and checks
  // that the coordinator stored no job.
  void ExpectRejected(const std::string& name, const std::string& yaml,
                      const std::vector<std::string>& fragments) {
    const std::string path = cluster_->WriteSpec(name, yaml);
    CommandResult submitted = cluster_->Ctl({"--json", "submit", path});
    EXPECT_NE(submitted.exit_code, 0) << name << " was accepted: " << submitted.out;
    for (const std::string& fragment : fragments) {
      EXPECT_THAT(submitted.err, HasSubstr(fragment)) << name;
    }
    nlohmann::json listed = cluster_->CtlJson({"list"});
    ASSERT_FALSE(listed.is_null());
    EXPECT_TRUE(listed["jobs"].empty()) << name << " left a job behind: " << listed.dump();
  }

  static Cluster* cluster_;
};

Cluster* SpecRejectionTest::cluster_ = nullptr;

TEST_F(SpecRejectionTest, MalformedYaml) {
  ExpectRejected("malformed", "name: broken\nmodel: {dim: 32, layers: [\n", {"invalid spec"});
}

TEST_F(SpecRejectionTest, UnknownField) {
  ExpectRejected("unknown", TinySpec("unknown", 3) + "modle: {dim: 32}\n", {"modle"});
}

TEST_F(SpecRejectionTest, WronglyTypedValue) {
  ExpectRejected("typed", "name: typed\nmodel: {dim: lots}\n", {"model.dim"});
}

TEST_F(SpecRejectionTest, MissingName) {
  ExpectRejected("nameless", "model: {vocab: 64, dim: 32, layers: 1, heads: 2}\n", {"name"});
}

TEST_F(SpecRejectionTest, HeadsThatDoNotDivideTheWidth) {
  ExpectRejected("heads",
                 "name: heads\nmodel: {vocab: 64, dim: 30, layers: 1, heads: 4}\n"
                 "data: {source: synthetic, seq_len: 16}\n"
                 "parallel: {world_size: 2, device: cpu, param_dtype: fp32}\n",
                 {"model.dim"});
}

TEST_F(SpecRejectionTest, ModelTooLargeForAnyWorker) {
  // Far more parameters than any host's memory can hold.
  ExpectRejected("huge",
                 "name: huge\nmodel: {vocab: 32000, dim: 16384, layers: 64, heads: 64}\n"
                 "data: {source: synthetic, seq_len: 1024}\n"
                 "parallel: {world_size: 2, device: cpu, param_dtype: fp32}\n",
                 {"parallel.device", "memory"});
}

// Rules a worker used to find only after the job was stored and scheduled; each is now refused
// at submission (proto/spec/spec_validate.h).
TEST_F(SpecRejectionTest, CudaWithFp32ParametersIsRefusedAtSubmit) {
  ExpectRejected("cudafp32",
                 "name: cudafp32\nmodel: {vocab: 64, dim: 32, layers: 1, heads: 2}\n"
                 "data: {source: synthetic, seq_len: 16}\n"
                 "parallel: {world_size: 1, device: cuda, param_dtype: fp32}\n",
                 {"parallel.param_dtype", "bf16"});
}

TEST_F(SpecRejectionTest, CudaAttentionLaunchLimitIsRefusedAtSubmit) {
  ExpectRejected("cudagrid",
                 "name: cudagrid\nmodel: {vocab: 64, dim: 64, layers: 1, heads: 16}\n"
                 "data: {source: synthetic, seq_len: 16}\ntrain: {batch_size: 8192}\n"
                 "parallel: {world_size: 1, device: cuda}\n",
                 {"train.batch_size", "65535"});
}

TEST_F(SpecRejectionTest, CudaHeadDimAboveTheCudnnLimitIsRefusedAtSubmit) {
  // head_dim 256 is accepted for cuda (cuDNN's fused attention runs it); 512 is beyond any.
  ExpectRejected("cudahead",
                 "name: cudahead\nmodel: {vocab: 64, dim: 1024, layers: 1, heads: 2}\n"
                 "data: {source: synthetic, seq_len: 16}\n"
                 "parallel: {world_size: 1, device: cuda}\n",
                 {"model.heads", "head_dim = dim / heads must be at most 256"});
}

TEST_F(SpecRejectionTest, EmptyLearningRateScheduleIsRefusedAtSubmit) {
  ExpectRejected("nosched",
                 "name: nosched\nmodel: {vocab: 64, dim: 32, layers: 1, heads: 2}\n"
                 "train: {lr_schedule: \"\"}\n"
                 "parallel: {world_size: 2, device: cpu, param_dtype: fp32}\n",
                 {"train.lr_schedule"});
}

TEST_F(SpecRejectionTest, DataInASystemFolderIsRefusedAtSubmit) {
  ExpectRejected("passwd",
                 "name: passwd\nmodel: {vocab: 256, dim: 32, layers: 1, heads: 2}\n"
                 "data: {source: text, path: /etc/passwd, seq_len: 16}\n"
                 "parallel: {world_size: 2, device: cpu, param_dtype: fp32}\n",
                 {"data.path", "system folder /etc"});
}

TEST_F(SpecRejectionTest, InitFromWithDotDotIsRefusedAtSubmit) {
  ExpectRejected("dotdot",
                 "name: dotdot\nmodel: {vocab: 64, dim: 32, layers: 1, heads: 2}\n"
                 "checkpoint: {init_from: /srv/../etc/shadow}\n"
                 "parallel: {world_size: 2, device: cpu, param_dtype: fp32}\n",
                 {"checkpoint.init_from", "'..'"});
}

// fsdpctl resolves every path field (proto/spec/spec_path_fields.h) against the spec file's
// folder before sending: a relative path that climbs from there into /etc reaches the validator
// as /etc/..., so it is refused for the system folder, not for being relative.
TEST_F(SpecRejectionTest, RelativePathFieldsAreResolvedAgainstTheSpecFolder) {
  const std::string spec_path = cluster_->WriteSpec("climb", "");
  std::string up;
  for (const auto& part : std::filesystem::path(spec_path).parent_path().relative_path()) {
    if (!part.empty()) up += "../";
  }
  ExpectRejected("climb",
                 "name: climb\nmodel: {vocab: 256, dim: 32, layers: 1, heads: 2}\n"
                 "data: {source: text, path: " +
                     up +
                     "etc/passwd, seq_len: 16}\n"
                     "checkpoint: {init_from: " +
                     up +
                     "etc/shadow}\n"
                     "parallel: {world_size: 2, device: cpu, param_dtype: fp32}\n",
                 {"data.path: must not point into the system folder /etc",
                  "checkpoint.init_from: must not point into the system folder /etc"});
}

TEST_F(SpecRejectionTest, OversizedFieldIsNamedBeforeSending) {
  // 8 MiB: over gRPC's default 4 MiB message limit, which would otherwise be the only error.
  const std::string path(8 << 20, 'a');
  ExpectRejected("bigpath",
                 "name: bigpath\nmodel: {vocab: 256, dim: 32, layers: 1, heads: 2}\n"
                 "data: {source: text, path: /" +
                     path + ", seq_len: 16}\n",
                 {"data.path: must be at most 4096 characters"});
}

TEST_F(SpecRejectionTest, RepeatedKeyIsNamedInsteadOfLastOneWinning) {
  ExpectRejected("twice",
                 "name: twice\nmodel: {vocab: 64, dim: 32, layers: 1, heads: 2}\n"
                 "train: {steps: 3}\ntrain: {steps: 5}\n"
                 "parallel: {world_size: 2, device: cpu, param_dtype: fp32}\n",
                 {"train: appears more than once"});
}

TEST_F(SpecRejectionTest, OutOfRangeIntegerSaysSoWithTheRange) {
  ExpectRejected("wide",
                 "name: wide\nmodel: {vocab: 64, dim: 32, layers: 1, heads: 2}\n"
                 "parallel: {world_size: 99999999999, device: cpu, param_dtype: fp32}\n",
                 {"parallel.world_size: 99999999999 is out of range", "2147483647"});
}

TEST_F(SpecRejectionTest, DryRunOfAGoodSpecStoresNothing) {
  const std::string path = cluster_->WriteSpec("dry", TinySpec("dry", 3));
  nlohmann::json checked = cluster_->CtlJson({"submit", "--dry-run", path});
  ASSERT_FALSE(checked.is_null());
  EXPECT_EQ(checked["valid"], true);
  nlohmann::json listed = cluster_->CtlJson({"list"});
  ASSERT_FALSE(listed.is_null());
  EXPECT_TRUE(listed["jobs"].empty());
}

TEST_F(SpecRejectionTest, UnknownJobIsNamed) {
  CommandResult status = cluster_->Ctl({"--json", "status", "no-such-job"});
  EXPECT_NE(status.exit_code, 0);
  EXPECT_THAT(status.err, HasSubstr("no-such-job"));
  EXPECT_THAT(status.err, HasSubstr("not found"));
}

TEST(UnreachableCoordinatorTest, SaysWhichAddressFailed) {
  const UnusedPort unused;
  const std::string address = unused.address();
  CommandResult listed =
      RunCommand({BuildPath("client/fsdpctl"), "--coordinator", address, "--json", "list"},
                 std::chrono::seconds(30));
  EXPECT_NE(listed.exit_code, 0);
  EXPECT_THAT(listed.err, HasSubstr("cannot reach the coordinator at " + address));
}

}  // namespace
}  // namespace fsdpd::testing
