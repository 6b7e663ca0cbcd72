// The model config in an export's __metadata__ (formats/model_metadata.h): written with the
// tensors, read back exactly, and every malformed or missing key refused by name.
#include <map>
#include <string>

#include "formats/model_metadata.h"
#include "formats/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

ExportedModelConfig Seed() {
  return {.vocab = 32000,
          .dim = 2048,
          .layers = 12,
          .heads = 16,
          .ffn_mult = 4,
          .causal = false,
          .final_norm = true,
          .norm_eps = 1.1920928955078125e-07};
}

TEST(EdgeMetadataTest, RoundTripsThroughASafetensorsFileExactly) {
  fsdpd::testing::TempDir dir;
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "7"}};
  AppendModelMetadata(Seed(), &metadata);
  const std::string path = dir.File("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"embed.weight", {2, 2}, {1, 2, 3, 4}}}, metadata).ok());
  std::map<std::string, std::string> read;
  ASSERT_TRUE(ReadSafetensors(path, &read).ok());
  EXPECT_EQ(read, metadata);
  absl::StatusOr<ExportedModelConfig> config = ParseModelMetadata(read, path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->vocab, 32000);
  EXPECT_EQ(config->dim, 2048);
  EXPECT_EQ(config->layers, 12);
  EXPECT_EQ(config->heads, 16);
  EXPECT_EQ(config->ffn_mult, 4);
  EXPECT_FALSE(config->causal);
  EXPECT_TRUE(config->final_norm);
  EXPECT_EQ(config->norm_eps, Seed().norm_eps);  // bit-exact through 17 digits
}

TEST(EdgeMetadataTest, MissingOrMalformedKeysAreNamed) {
  std::map<std::string, std::string> good;
  AppendModelMetadata(Seed(), &good);
  struct Case {
    std::string key, value, message;  // value "" with key set: the key is removed
  };
  for (const Case& c : std::initializer_list<Case>{
           {"heads", "", "lacks the model key(s) heads"},
           {"dim", "wide", "'dim' must be a positive integer (got 'wide')"},
           {"layers", "0", "'layers' must be a positive integer (got '0')"},
           {"causal", "yes", "'causal' must be true or false (got 'yes')"},
           {"norm_eps", "-1", "'norm_eps' must be a positive number (got '-1')"},
           {"architecture", "llama", "'architecture' is 'llama', expected 'fsdpd.MiniLLM'"},
           {"heads", "3", "'dim' 2048 is not a multiple of 'heads' 3"}}) {
    std::map<std::string, std::string> metadata = good;
    if (c.value.empty()) {
      metadata.erase(c.key);
    } else {
      metadata[c.key] = c.value;
    }
    absl::StatusOr<ExportedModelConfig> config = ParseModelMetadata(metadata, "m.safetensors");
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << c.key;
    EXPECT_THAT(config.status().message(), HasSubstr(c.message));
    EXPECT_THAT(config.status().message(), HasSubstr("m.safetensors"));
  }
  absl::StatusOr<ExportedModelConfig> none =
      ParseModelMetadata({{"format", "pt"}}, "old.safetensors");
  EXPECT_THAT(none.status().message(), HasSubstr("has no model config in its __metadata__"));
}

}  // namespace
}  // namespace fsdpd
