// libFuzzer target: a `data.source: tokens` or `text` file opened by CreateDataLoader. The
// first byte picks the loader settings, the rest is the file; a loader that opens must serve
// batches whose ids are inside the vocabulary.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "worker/data/data_loader.h"

namespace {

std::string TempPath() {
  static const std::string path = [] {
    char name[] = "/tmp/fsdpd_token_fuzz_XXXXXX";
    const int fd = mkstemp(name);
    if (fd >= 0) close(fd);
    return std::string(name);
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t settings = data[0];
  const std::string path = TempPath();
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return 0;
  if (size > 1) std::fwrite(data + 1, 1, size - 1, file);
  std::fclose(file);

  fsdpd::DataLoaderOptions options;
  options.data.set_source((settings & 0x80) != 0 ? "text" : "tokens");
  options.data.set_path(path);
  options.data.set_seq_len(1 + (settings & 0x07));
  options.data.set_token_bytes((settings & 0x08) != 0 ? 4 : 2);
  options.vocab = (settings & 0x10) != 0 ? 256 : 65536;
  options.batch_size = 1 + ((settings >> 5) & 0x01);
  options.world_size = 1 + ((settings >> 6) & 0x01);
  options.rank = options.world_size - 1;
  absl::StatusOr<std::unique_ptr<fsdpd::DataLoader>> loader = fsdpd::CreateDataLoader(options);
  if (!loader.ok()) return 0;
  const size_t count = static_cast<size_t>(options.batch_size * options.data.seq_len());
  std::vector<int32_t> inputs(count), targets(count);
  for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{1} << 40}) {
    if (!(*loader)->Batch(step, inputs.data(), targets.data()).ok()) continue;
    for (size_t i = 0; i < count; ++i) {
      if (inputs[i] < 0 || inputs[i] >= options.vocab || targets[i] < 0 ||
          targets[i] >= options.vocab) {
        std::fprintf(stderr, "token id out of the vocabulary\n");
        __builtin_trap();
      }
    }
  }
  return 0;
}
