// libFuzzer target: a checkpoint's MANIFEST.json as LoadRankCheckpoint reads it. The input is
// written as the manifest of step 1 next to a small rank file, so the whole load path runs: a
// manifest must never make the loader crash, read outside the step directory, or allocate
// without bound.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "worker/checkpoint/checkpoint.h"

namespace {

const std::string& JobDirectory() {
  static const std::string directory = [] {
    char name[] = "/tmp/fsdpd_manifest_fuzz_XXXXXX";
    std::string made = mkdtemp(name) != nullptr ? name : "/tmp/fsdpd_manifest_fuzz";
    // A real rank file for step 1, so a manifest that matches it reaches the rank-file parser.
    fsdpd::RankCheckpoint state;
    state.step = 1;
    state.world_size = 1;
    state.buffers.push_back({"unit.0.param", {1.0f, 2.0f}});
    (void)fsdpd::WriteRankCheckpoint(made, state);
    return made;
  }();
  return directory;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& job_dir = JobDirectory();
  const std::string manifest = job_dir + "/step-00000001/MANIFEST.json";
  FILE* file = std::fopen(manifest.c_str(), "wb");
  if (file == nullptr) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  (void)fsdpd::LoadRankCheckpoint(job_dir, 1, 0, 1);
  (void)fsdpd::ListCommittedSteps(job_dir);
  return 0;
}
