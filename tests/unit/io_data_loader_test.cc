#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "worker/data/data_loader.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

class TempDirectory {
 public:
  TempDirectory() {
    std::string pattern = ::testing::TempDir() + "io_data_XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDirectory() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void WriteTokens(const std::string& path, const std::vector<T>& tokens) {
  std::string bytes(tokens.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), tokens.data(), bytes.size());
  WriteBytes(path, bytes);
}

DataLoaderOptions Options(const std::string& source, const std::string& path, int64_t seq_len,
                          int64_t vocab, int64_t batch_size, int rank, int world_size,
                          int token_bytes = 2) {
  DataLoaderOptions options;
  options.data.set_source(source);
  options.data.set_path(path);
  options.data.set_seq_len(seq_len);
  options.data.set_token_bytes(token_bytes);
  options.vocab = vocab;
  options.batch_size = batch_size;
  options.rank = rank;
  options.world_size = world_size;
  options.seed = 1234;
  return options;
}

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

Batch Fetch(DataLoader& loader, const DataLoaderOptions& options, int64_t step) {
  Batch batch;
  const size_t size = static_cast<size_t>(options.batch_size * options.data.seq_len());
  batch.inputs.assign(size, -1);
  batch.targets.assign(size, -1);
  const absl::Status status = loader.Batch(step, batch.inputs.data(), batch.targets.data());
  EXPECT_TRUE(status.ok()) << status;
  return batch;
}

std::unique_ptr<DataLoader> MustCreate(const DataLoaderOptions& options) {
  auto loader = CreateDataLoader(options);
  EXPECT_TRUE(loader.ok()) << loader.status();
  return loader.ok() ? std::move(*loader) : nullptr;
}

// The window rule written out independently of the loader, as the PyTorch fixtures apply it.
template <typename T>
Batch ExpectedWindows(const std::vector<T>& tokens, const DataLoaderOptions& options,
                      int64_t step) {
  const int64_t seq_len = options.data.seq_len();
  const int64_t num_windows = (static_cast<int64_t>(tokens.size()) - 1) / seq_len;
  Batch batch;
  for (int64_t row = 0; row < options.batch_size; ++row) {
    const int64_t k =
        (step * options.world_size * options.batch_size + options.rank * options.batch_size + row) %
        num_windows;
    for (int64_t position = 0; position < seq_len; ++position) {
      batch.inputs.push_back(static_cast<int32_t>(tokens[k * seq_len + position]));
      batch.targets.push_back(static_cast<int32_t>(tokens[k * seq_len + position + 1]));
    }
  }
  return batch;
}

TEST(SyntheticDataLoaderTest, TokensAreInRangeAndRoughlyUniform) {
  auto options = Options("synthetic", "", 64, 50, 8, 0, 1);
  auto loader = MustCreate(options);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->num_tokens(), -1);
  std::vector<int> histogram(50, 0);
  for (int64_t step = 0; step < 20; ++step) {
    Batch batch = Fetch(*loader, options, step);
    for (int32_t token : batch.inputs) {
      ASSERT_GE(token, 0);
      ASSERT_LT(token, 50);
      ++histogram[token];
    }
    for (int32_t token : batch.targets) {
      ASSERT_GE(token, 0);
      ASSERT_LT(token, 50);
    }
  }
  // 10240 draws over 50 ids: each expects ~205 with a standard deviation of ~14.
  for (int count : histogram) {
    EXPECT_GT(count, 130);
    EXPECT_LT(count, 280);
  }
}

TEST(SyntheticDataLoaderTest, SameStepGivesSameBatchAndStepsDiffer) {
  auto options = Options("synthetic", "", 32, 1000, 4, 0, 1);
  auto first = MustCreate(options);
  auto second = MustCreate(options);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  Batch a = Fetch(*first, options, 7);
  Batch b = Fetch(*second, options, 7);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.targets, b.targets);
  Batch c = Fetch(*first, options, 8);
  EXPECT_NE(a.inputs, c.inputs);
  // Targets are drawn independently, not the inputs shifted by one (as in the seed).
  EXPECT_NE(std::vector<int32_t>(a.inputs.begin() + 1, a.inputs.begin() + 32),
            std::vector<int32_t>(a.targets.begin(), a.targets.begin() + 31));
  // A different seed gives different data.
  auto reseeded_options = options;
  reseeded_options.seed = 99;
  auto reseeded = MustCreate(reseeded_options);
  ASSERT_NE(reseeded, nullptr);
  EXPECT_NE(Fetch(*reseeded, reseeded_options, 7).inputs, a.inputs);
}

TEST(SyntheticDataLoaderTest, RanksGetDisjointRowsOfOneGlobalBatch) {
  // World size 1 with batch 4 and world size 2 with batch 2 see the same global batch, and
  // the two ranks split it without sharing a row.
  auto whole_options = Options("synthetic", "", 16, 32000, 4, 0, 1);
  auto whole = MustCreate(whole_options);
  ASSERT_NE(whole, nullptr);
  for (int64_t step : {0, 3}) {
    Batch global = Fetch(*whole, whole_options, step);
    std::vector<int32_t> joined;
    std::set<std::vector<int32_t>> rows;
    for (int rank = 0; rank < 2; ++rank) {
      auto options = Options("synthetic", "", 16, 32000, 2, rank, 2);
      auto loader = MustCreate(options);
      ASSERT_NE(loader, nullptr);
      Batch part = Fetch(*loader, options, step);
      joined.insert(joined.end(), part.inputs.begin(), part.inputs.end());
      for (int row = 0; row < 2; ++row) {
        rows.insert(std::vector<int32_t>(part.inputs.begin() + row * 16,
                                         part.inputs.begin() + (row + 1) * 16));
      }
    }
    EXPECT_EQ(joined, global.inputs);
    EXPECT_EQ(rows.size(), 4u);
  }
}

TEST(TokenDataLoaderTest, Uint16WindowsFollowTheRule) {
  TempDirectory directory;
  std::vector<uint16_t> tokens(103);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 37) % 500);
  const std::string path = directory.File("train.bin");
  WriteTokens(path, tokens);
  for (int rank = 0; rank < 2; ++rank) {
    auto options = Options("tokens", path, 10, 500, 3, rank, 2);
    auto loader = MustCreate(options);
    ASSERT_NE(loader, nullptr);
    EXPECT_EQ(loader->num_tokens(), 103);
    // 10 windows and 6 rows per global step: steps 1 and 2 wrap around the file.
    for (int64_t step : {0, 1, 2, 17}) {
      Batch batch = Fetch(*loader, options, step);
      Batch expected = ExpectedWindows(tokens, options, step);
      EXPECT_EQ(batch.inputs, expected.inputs) << "rank " << rank << " step " << step;
      EXPECT_EQ(batch.targets, expected.targets) << "rank " << rank << " step " << step;
    }
  }
}

TEST(TokenDataLoaderTest, Uint32TokensAboveUint16Range) {
  TempDirectory directory;
  std::vector<uint32_t> tokens(41);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(70000 + i * 3);
  const std::string path = directory.File("train.bin");
  WriteTokens(path, tokens);
  auto options = Options("tokens", path, 8, 100000, 2, 1, 2, 4);
  auto loader = MustCreate(options);
  ASSERT_NE(loader, nullptr);
  for (int64_t step : {0, 1, 5}) {
    Batch batch = Fetch(*loader, options, step);
    Batch expected = ExpectedWindows(tokens, options, step);
    EXPECT_EQ(batch.inputs, expected.inputs);
    EXPECT_EQ(batch.targets, expected.targets);
  }
  EXPECT_EQ(Fetch(*loader, options, 0).inputs[0], static_cast<int32_t>(tokens[16]));
}

TEST(TokenDataLoaderTest, FileOfExactlyOneWindowIsValid) {
  TempDirectory directory;
  const std::vector<uint16_t> tokens = {5, 6, 7, 8, 9};
  const std::string path = directory.File("one.bin");
  WriteTokens(path, tokens);
  auto options = Options("tokens", path, 4, 10, 2, 0, 1);
  auto loader = MustCreate(options);
  ASSERT_NE(loader, nullptr);
  Batch batch = Fetch(*loader, options, 3);
  EXPECT_EQ(batch.inputs, (std::vector<int32_t>{5, 6, 7, 8, 5, 6, 7, 8}));
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{6, 7, 8, 9, 6, 7, 8, 9}));
}

TEST(TokenDataLoaderTest, RanksReadDisjointWindows) {
  TempDirectory directory;
  std::vector<uint16_t> tokens(1001);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  const std::string path = directory.File("train.bin");
  WriteTokens(path, tokens);
  std::set<int32_t> window_starts;
  for (int rank = 0; rank < 4; ++rank) {
    auto options = Options("tokens", path, 10, 2000, 5, rank, 4);
    auto loader = MustCreate(options);
    ASSERT_NE(loader, nullptr);
    Batch batch = Fetch(*loader, options, 2);
    for (int row = 0; row < 5; ++row) window_starts.insert(batch.inputs[row * 10]);
  }
  EXPECT_EQ(window_starts.size(), 20u);
}

TEST(TokenDataLoaderTest, ResumeFromAStepReproducesTheRun) {
  TempDirectory directory;
  std::vector<uint16_t> tokens(777);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * i) % 300);
  const std::string path = directory.File("train.bin");
  WriteTokens(path, tokens);
  for (const std::string source : {"tokens", "synthetic"}) {
    auto options = Options(source, path, 12, 300, 2, 1, 3);
    auto uninterrupted = MustCreate(options);
    ASSERT_NE(uninterrupted, nullptr);
    std::vector<Batch> run;
    for (int64_t step = 0; step < 10; ++step) run.push_back(Fetch(*uninterrupted, options, step));
    auto resumed = MustCreate(options);
    ASSERT_NE(resumed, nullptr);
    for (int64_t step = 6; step < 10; ++step) {
      Batch batch = Fetch(*resumed, options, step);
      EXPECT_EQ(batch.inputs, run[step].inputs) << source << " step " << step;
      EXPECT_EQ(batch.targets, run[step].targets) << source << " step " << step;
    }
  }
}

TEST(TextDataLoaderTest, EachByteIsAToken) {
  TempDirectory directory;
  const std::string text = "hello, fsdpd! \xC3\xA9t\xC3\xA9";
  const std::string path = directory.File("corpus.txt");
  WriteBytes(path, text);
  std::vector<uint8_t> bytes(text.begin(), text.end());
  auto options = Options("text", path, 4, 256, 2, 1, 2);
  auto loader = MustCreate(options);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->num_tokens(), static_cast<int64_t>(text.size()));
  for (int64_t step : {0, 1, 2}) {
    Batch batch = Fetch(*loader, options, step);
    Batch expected = ExpectedWindows(bytes, options, step);
    EXPECT_EQ(batch.inputs, expected.inputs);
    EXPECT_EQ(batch.targets, expected.targets);
  }
  // Bytes above 127 stay unsigned ids.
  Batch batch = Fetch(*loader, options, 0);
  for (int32_t token : batch.inputs) EXPECT_GE(token, 0);
}

TEST(DataLoaderErrorsTest, MissingFileNamesThePath) {
  auto loader = CreateDataLoader(Options("tokens", "/nonexistent/dir/train.bin", 8, 100, 1, 0, 1));
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(loader.status().message(), HasSubstr("/nonexistent/dir/train.bin"));
}

TEST(DataLoaderErrorsTest, SizeNotAMultipleOfTokenBytes) {
  TempDirectory directory;
  const std::string path = directory.File("odd.bin");
  WriteBytes(path, std::string(41, '\0'));
  auto loader = CreateDataLoader(Options("tokens", path, 8, 100, 1, 0, 1, 4));
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("41 bytes, not a multiple of"));
  EXPECT_THAT(loader.status().message(), HasSubstr("token_bytes = 4"));
}

TEST(DataLoaderErrorsTest, TooFewTokensForOneWindow) {
  TempDirectory directory;
  const std::string path = directory.File("short.bin");
  WriteTokens(path, std::vector<uint16_t>{1, 2, 3, 4, 5});
  auto loader = CreateDataLoader(Options("tokens", path, 8, 100, 1, 0, 1));
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("needs at least 9 tokens, has 5"));
  auto empty_path = directory.File("empty.bin");
  WriteBytes(empty_path, "");
  auto empty = CreateDataLoader(Options("tokens", empty_path, 8, 100, 1, 0, 1));
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("needs at least 9 tokens, has 0"));
}

TEST(DataLoaderErrorsTest, TokenAtOrAboveVocabNamesOffsetAndValue) {
  TempDirectory directory;
  const std::string path = directory.File("bad.bin");
  std::vector<uint16_t> tokens(50, 3);
  tokens[37] = 100;  // == vocab: out of range
  tokens[45] = 200;
  WriteTokens(path, tokens);
  auto loader = CreateDataLoader(Options("tokens", path, 8, 100, 1, 0, 1));
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("token 37 (byte offset 74) has id 100"));
  EXPECT_THAT(loader.status().message(), HasSubstr("model.vocab = 100"));
}

TEST(DataLoaderErrorsTest, BadOptionsAreRejected) {
  TempDirectory directory;
  const std::string path = directory.File("ok.txt");
  WriteBytes(path, std::string(100, 'a'));
  struct Case {
    DataLoaderOptions options;
    std::string message;
  };
  std::vector<Case> cases = {
      {Options("text", path, 8, 255, 1, 0, 1), "needs model.vocab >= 256 (got 255)"},
      {Options("tokens", path, 8, 300, 1, 0, 1, 3), "data.token_bytes must be 2"},
      {Options("parquet", path, 8, 300, 1, 0, 1), "data.source must be"},
      {Options("tokens", "", 8, 300, 1, 0, 1), "needs data.path"},
      {Options("synthetic", "", 0, 300, 1, 0, 1), "data.seq_len must be positive"},
      {Options("synthetic", "", 8, 0, 1, 0, 1), "model.vocab must be"},
      {Options("synthetic", "", 8, 300, 0, 0, 1), "train.batch_size must be positive"},
      {Options("synthetic", "", 8, 300, 1, 2, 2), "rank 2 is outside world size 2"},
  };
  for (const Case& test_case : cases) {
    auto loader = CreateDataLoader(test_case.options);
    ASSERT_FALSE(loader.ok()) << test_case.message;
    EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(loader.status().message(), HasSubstr(test_case.message));
  }
}

// Every source starts Batch the same way (worker/data/batch_rows.h): a negative step or a missing
// buffer is refused before any token is written.
TEST(DataLoaderErrorsTest, NegativeStepAndMissingBuffersAreErrorsForEverySource) {
  TempDirectory directory;
  const std::string tokens = directory.File("tokens.bin");
  WriteTokens(tokens, std::vector<uint16_t>(50, 3));
  const std::string text = directory.File("text.txt");
  WriteBytes(text, std::string(50, 'a'));
  for (const DataLoaderOptions& options :
       {Options("synthetic", "", 4, 10, 2, 0, 1), Options("tokens", tokens, 4, 10, 2, 0, 1),
        Options("text", text, 4, 256, 2, 0, 1)}) {
    auto loader = MustCreate(options);
    ASSERT_NE(loader, nullptr);
    std::vector<int32_t> inputs(8, -1), targets(8, -1);
    const absl::Status negative = loader->Batch(-1, inputs.data(), targets.data());
    EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << options.data.source();
    EXPECT_THAT(negative.message(), HasSubstr("negative data step -1"));
    EXPECT_EQ(inputs, std::vector<int32_t>(8, -1)) << options.data.source();
    EXPECT_EQ(loader->Batch(0, nullptr, targets.data()).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(loader->Batch(0, inputs.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(targets, std::vector<int32_t>(8, -1)) << options.data.source();
  }
}

}  // namespace
}  // namespace fsdpd
