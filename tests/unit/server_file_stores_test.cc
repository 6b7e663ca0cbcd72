// The coordinator's file stores under <artifact_dir>: the exported model (server/artifact_store.h)
// and the profiles (server/profile_store.h). A job id from a worker becomes one folder there, so
// both refuse any id that is not one path component (base/path_component.h): "." would write into
// the root itself, ".." next to it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "server/artifact_store.h"
#include "server/profile_store.h"
#include "tests/support/temp_dir.h"

namespace fsdpd::server {
namespace {

using ::testing::HasSubstr;

namespace fs = std::filesystem;

const std::vector<std::string> kNotOneComponent = {"", ".", "..", "../x", "a/b", "job\n1"};

// Every regular file under `folder`, relative to it.
std::vector<std::string> FilesUnder(const std::string& folder) {
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file()) files.push_back(fs::relative(entry.path(), folder).string());
  }
  return files;
}

v1::ArtifactChunk ModelChunk(const std::string& job_id) {
  v1::ArtifactChunk chunk;
  chunk.set_job_id(job_id);
  chunk.set_name(ArtifactStore::kModelArtifact);
  chunk.mutable_chunk()->set_offset(0);
  chunk.mutable_chunk()->set_data("weights");
  chunk.mutable_chunk()->set_total_bytes(7);
  chunk.set_last(true);
  return chunk;
}

v1::ProfileReport ProfileOf(const std::string& job_id) {
  v1::ProfileReport report;
  report.set_job_id(job_id);
  report.add_kernels()->set_name("gemm");
  report.set_trace_chunk("{}");
  report.set_trace_last(true);
  return report;
}

TEST(ArtifactStore, RefusesAJobIdThatIsNotOneComponentAndWritesNothing) {
  fsdpd::testing::TempDir dir;
  ArtifactStore store(dir.path() + "/artifacts");
  for (const std::string& job_id : kNotOneComponent) {
    const absl::Status status = store.WriteChunk(ModelChunk(job_id), 1 << 20);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << job_id;
    EXPECT_THAT(std::string(status.message()), HasSubstr("job_id")) << job_id;
  }
  EXPECT_TRUE(FilesUnder(dir.path()).empty());
  // The same chunk under an ordinary id is stored where Find looks.
  ASSERT_TRUE(store.WriteChunk(ModelChunk("job-000001"), 1 << 20).ok());
  EXPECT_EQ(FilesUnder(dir.path()),
            std::vector<std::string>{"artifacts/job-000001/model.safetensors"});
  EXPECT_TRUE(store.Find("job-000001", ArtifactStore::kModelArtifact).ok());
}

TEST(ProfileStore, RefusesAJobIdThatIsNotOneComponentAndWritesNothing) {
  fsdpd::testing::TempDir dir;
  ProfileStore store(dir.path() + "/profiles");
  for (const std::string& job_id : kNotOneComponent) {
    const absl::Status status = store.Write(ProfileOf(job_id));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << job_id;
    EXPECT_THAT(std::string(status.message()), HasSubstr("job_id")) << job_id;
  }
  EXPECT_TRUE(FilesUnder(dir.path()).empty());
  v1::ProfileReport negative = ProfileOf("job-000001");
  negative.set_rank(-1);
  EXPECT_EQ(store.Write(negative).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store.Write(ProfileOf("job-000001")).ok());
  EXPECT_TRUE(store.KernelTable("job-000001", 0).ok());
  EXPECT_TRUE(store.TracePath("job-000001", 0).ok());
}

}  // namespace
}  // namespace fsdpd::server
