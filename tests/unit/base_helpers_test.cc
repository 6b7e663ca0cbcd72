// The small helpers of base/ that several layers share: the one path-component rule
// (base/path_component.h), SplitMix64 (base/splitmix64.h) and the PEM reader (base/pem_file.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "base/path_component.h"
#include "base/pem_file.h"
#include "base/splitmix64.h"
#include "tests/support/temp_dir.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

TEST(CheckPathComponent, RefusesWhatIsNotOneComponentNamingWhy) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "is empty"},
      {".", "names a folder itself"},
      {"..", "names a folder itself"},
      {"a/b", "holds a path separator"},
      {"/abs", "holds a path separator"},
      {"a\\b", "holds a path separator"},
      {std::string("a\0b", 3), "holds a control character"},
      {"line\nbreak", "holds a control character"},
      {"del\x7f", "holds a control character"},
      {std::string(kMaxPathComponentBytes + 1, 'x'), "is longer than a file name may be"},
  };
  for (const auto& [name, reason] : cases) {
    const absl::Status status = CheckPathComponent("job uid", name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(status.message()), HasSubstr("job uid \"")) << name;
    EXPECT_THAT(std::string(status.message()), HasSubstr(reason)) << name;
  }
  // Escaped and cut: a hostile name is never echoed whole or raw.
  const absl::Status status = CheckPathComponent("job uid", "a\n" + std::string(1000, 'z'));
  EXPECT_THAT(std::string(status.message()), HasSubstr("a\\n"));
  EXPECT_LT(status.message().size(), 200u);
}

TEST(CheckPathComponent, AcceptsOrdinaryNames) {
  const std::vector<std::string> names = {"job-000001", "3f2a9c1e-uid",
                                          "...",        ".hidden",
                                          "a..b",       std::string(kMaxPathComponentBytes, 'x')};
  for (const std::string& name : names) {
    EXPECT_TRUE(CheckPathComponent("job id", name).ok()) << name;
  }
}

// The reference outputs of Vigna's splitmix64.c from state 0: its k-th output (k from 0) is
// SplitMix64(k · 0x9E3779B97F4A7C15).
TEST(SplitMix64, MatchesTheReferenceOutputs) {
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(SplitMix64(2 * 0x9E3779B97F4A7C15ull), 0x06C45D188009454Full);
}

TEST(ReadPemFile, ReadsAPemFileAndNamesTheFlagOtherwise) {
  testing::TempDir dir;
  const std::string pem = dir.path() + "/cert.pem";
  const std::string text = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  std::ofstream(pem) << text;
  absl::StatusOr<std::string> read = ReadPemFile("--tls-cert", pem);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, text);

  const std::string plain = dir.path() + "/plain.txt";
  std::ofstream(plain) << "not a certificate";
  read = ReadPemFile("--tls-key", plain);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("--tls-key: "));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("is not a PEM file"));

  read = ReadPemFile("--tls-ca", dir.path() + "/missing.pem");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("--tls-ca: cannot open"));
}

}  // namespace
}  // namespace fsdpd
