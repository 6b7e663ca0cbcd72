#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/durable_file.h"
#include "formats/safetensors.h"
#include "tests/support/temp_dir.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

using ::fsdpd::testing::TempDir;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file from a header and raw data, for inputs our writer would never produce.
std::string MakeFile(const std::string& header, const std::string& data) {
  const uint64_t length = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &length, 8);
  return bytes + header + data;
}

std::vector<NamedTensor> SampleTensors() {
  NamedTensor matrix{
      "layers.0.attn.in_proj_weight", {3, 2}, {1.5f, -2.0f, 0.0f, 1e-8f, 3e8f, -0.25f}};
  NamedTensor vector{"layers.0.attn.in_proj_bias", {3}, {0.1f, 0.2f, 0.3f}};
  NamedTensor scalar{"scale", {}, {42.0f}};
  NamedTensor empty{"empty", {0, 4}, {}};
  return {matrix, vector, scalar, empty};
}

// The Python side of the interoperability tests: numpy and safetensors' numpy API, which
// scripts/install_deps.sh installs. Their absence is a failure, not a reason to skip.
::testing::AssertionResult PythonSafetensorsImportable() {
  if (std::system("python3 -c 'import numpy, safetensors.numpy' >/dev/null 2>&1") == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "python3 cannot import numpy and safetensors.numpy; run scripts/install_deps.sh";
}

TEST(SafetensorsTest, RoundTripKeepsNamesShapesValuesAndOrder) {
  TempDir directory;
  const std::string path = directory.File("model.safetensors");
  const auto tensors = SampleTensors();
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  auto read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ((*read)[i].name, tensors[i].name);
    EXPECT_EQ((*read)[i].shape, tensors[i].shape);
    EXPECT_EQ((*read)[i].values, tensors[i].values);
  }
  // The data section starts 8-byte aligned, as the Python writer lays it out.
  const std::string bytes = ReadBytes(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  EXPECT_EQ(header_length % 8, 0u);
  EXPECT_THAT(bytes.substr(8, header_length), HasSubstr("\"__metadata__\":{\"format\":\"pt\"}"));
}

TEST(SafetensorsTest, ViewsWriteTheSameFile) {
  TempDir directory;
  const auto tensors = SampleTensors();
  std::vector<TensorView> views;
  for (const auto& tensor : tensors)
    views.push_back({tensor.name, tensor.shape, tensor.values.data()});
  ASSERT_TRUE(WriteSafetensors(directory.File("a"), tensors).ok());
  ASSERT_TRUE(WriteSafetensorsViews(directory.File("b"), views).ok());
  EXPECT_EQ(ReadBytes(directory.File("a")), ReadBytes(directory.File("b")));
}

TEST(SafetensorsTest, ConvertsHalfBfloatAndIntegerDtypes) {
  // F16: 1.0, -2.0, smallest subnormal, +inf. BF16: 1.0, -3.0. I64: -7, 1<<40. I32: 123.
  const uint16_t half[] = {0x3C00, 0xC000, 0x0001, 0x7C00};
  const uint16_t bfloat[] = {0x3F80, 0xC040};
  const int64_t int64[] = {-7, int64_t{1} << 40};
  const int32_t int32[] = {123};
  std::string data(reinterpret_cast<const char*>(half), sizeof(half));
  data.append(reinterpret_cast<const char*>(bfloat), sizeof(bfloat));
  data.append(reinterpret_cast<const char*>(int64), sizeof(int64));
  data.append(reinterpret_cast<const char*>(int32), sizeof(int32));
  const std::string header = R"({"h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
                             R"("l":{"dtype":"I64","shape":[2],"data_offsets":[12,28]},)"
                             R"("i":{"dtype":"I32","shape":[1],"data_offsets":[28,32]}})";
  auto tensors = ParseSafetensors(MakeFile(header, data));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 4u);
  EXPECT_EQ((*tensors)[0].name, "h");
  EXPECT_EQ((*tensors)[0].values[0], 1.0f);
  EXPECT_EQ((*tensors)[0].values[1], -2.0f);
  EXPECT_EQ((*tensors)[0].values[2], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf((*tensors)[0].values[3]));
  EXPECT_EQ((*tensors)[1].values, (std::vector<float>{1.0f, -3.0f}));
  EXPECT_EQ((*tensors)[2].values, (std::vector<float>{-7.0f, std::ldexp(1.0f, 40)}));
  EXPECT_EQ((*tensors)[3].values, (std::vector<float>{123.0f}));
}

TEST(SafetensorsTest, PythonReadsOurFiles) {
  ASSERT_TRUE(PythonSafetensorsImportable());
  TempDir directory;
  const std::string path = directory.File("model.safetensors");
  const auto tensors = SampleTensors();
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"step", "10"}}).ok());
  const std::string script = directory.File("check.py");
  WriteBytes(script,
             "import sys, numpy as np\n"
             "from safetensors import safe_open\n"
             "from safetensors.numpy import load_file\n"
             "t = load_file(sys.argv[1])\n"
             "w = t['layers.0.attn.in_proj_weight']\n"
             "assert w.dtype == np.float32 and w.shape == (3, 2), (w.dtype, w.shape)\n"
             "assert np.array_equal(w, np.array([[1.5, -2.0], [0.0, 1e-8], [3e8, -0.25]], "
             "dtype=np.float32))\n"
             "assert t['scale'].shape == () and t['scale'] == 42.0\n"
             "assert t['empty'].shape == (0, 4)\n"
             "assert np.allclose(t['layers.0.attn.in_proj_bias'], [0.1, 0.2, 0.3])\n"
             "with safe_open(sys.argv[1], 'np') as f:\n"
             "    assert f.metadata() == {'step': '10'}, f.metadata()\n");
  EXPECT_EQ(std::system(("python3 " + script + " " + path).c_str()), 0);
}

TEST(SafetensorsTest, WeReadPythonFiles) {
  ASSERT_TRUE(PythonSafetensorsImportable());
  TempDir directory;
  const std::string path = directory.File("python.safetensors");
  const std::string script = directory.File("make.py");
  WriteBytes(script,
             "import sys, numpy as np\n"
             "from safetensors.numpy import save_file\n"
             "save_file({'w': np.arange(6, dtype=np.float32).reshape(2, 3) / 4,\n"
             "           'h': np.array([0.5, -1.25], dtype=np.float16),\n"
             "           'ids': np.array([[3, 1], [4, 1]], dtype=np.int64),\n"
             "           'n': np.array([-9], dtype=np.int32)}, sys.argv[1])\n");
  ASSERT_EQ(std::system(("python3 " + script + " " + path).c_str()), 0);
  auto tensors = ReadSafetensors(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::map<std::string, NamedTensor> by_name;
  for (auto& tensor : *tensors) by_name[tensor.name] = tensor;
  ASSERT_EQ(by_name.size(), 4u);
  EXPECT_EQ(by_name["w"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(by_name["w"].values, (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f}));
  EXPECT_EQ(by_name["h"].values, (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(by_name["ids"].shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(by_name["ids"].values, (std::vector<float>{3, 1, 4, 1}));
  EXPECT_EQ(by_name["n"].values, (std::vector<float>{-9}));
}

TEST(SafetensorsTest, MalformedFilesGiveClearErrors) {
  const std::string four_floats(16, '\0');
  struct Case {
    std::string bytes;
    std::string message;
  };
  std::string huge_length(8, '\xff');
  huge_length += "{}";
  std::vector<Case> cases = {
      {"abc", "too short"},
      {huge_length, "runs past the end of the file"},
      {MakeFile("{\"a\": [", four_floats), "not valid JSON"},
      {MakeFile("[1, 2]", four_floats), "not a JSON object"},
      {MakeFile(R"({"a": 5})", four_floats), "tensor 'a' is not a JSON object"},
      {MakeFile(R"({"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", four_floats),
       "unsupported dtype 'F8_E4M3'"},
      {MakeFile(R"({"a":{"shape":[4],"data_offsets":[0,16]}})", four_floats), "no string 'dtype'"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", four_floats),
       "not a non-negative integer"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,20]}})", four_floats),
       "outside the data section of 16 bytes"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,4]}})", four_floats),
       "outside the data section"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four_floats),
       "spans 16 bytes but shape [3] of F32 needs 12"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                four_floats),
       "tensors 'a' and 'b' overlap"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", four_floats),
       "data_offsets"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"x":1}})", four_floats),
       "unknown field 'x'"},
      {MakeFile(R"({"__metadata__":{"k":1}})", four_floats), "__metadata__ value of 'k'"},
      {MakeFile(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],)"
                R"("data_offsets":[0,16]}})",
                four_floats),
       "impossibly large shape"},
  };
  // Deep nesting must neither overflow the stack in the parser nor in an error message.
  const std::string deep(200000, '[');
  cases.push_back({MakeFile(deep, four_floats), "not valid JSON"});
  cases.push_back({MakeFile(R"({"a":{"dtype":"F32","shape":[)" + std::string(100000, '[') +
                                std::string(100000, ']') + R"(],"data_offsets":[0,16]}})",
                            four_floats),
                   "not a non-negative integer: array"});
  for (const Case& test_case : cases) {
    auto tensors = ParseSafetensors(test_case.bytes, "case.safetensors");
    ASSERT_FALSE(tensors.ok()) << test_case.message;
    EXPECT_EQ(tensors.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(tensors.status().message(), HasSubstr(test_case.message));
    EXPECT_THAT(tensors.status().message(), HasSubstr("case.safetensors"));
  }
}

TEST(SafetensorsTest, RandomCorruptionNeverCrashes) {
  TempDir directory;
  const std::string path = directory.File("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, SampleTensors()).ok());
  const std::string original = ReadBytes(path);
  std::mt19937_64 random(2024);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = original;
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int edit = 0; edit < edits; ++edit) {
      switch (random() % 3) {
        case 0:
          bytes[random() % bytes.size()] = static_cast<char>(random());
          break;
        case 1:
          bytes.resize(random() % (bytes.size() + 1));
          if (bytes.empty()) bytes = "x";
          break;
        default:
          bytes.insert(random() % bytes.size(), 1, "{}[],:\"0-9e"[random() % 11]);
      }
    }
    auto tensors = ParseSafetensors(bytes);
    if (!tensors.ok()) {
      ++rejected;
      EXPECT_FALSE(tensors.status().message().empty());
    }
  }
  // Most random edits land in the header or cut the file, and must be caught.
  EXPECT_GT(rejected, 1000);
}

TEST(SafetensorsTest, ReadErrorsNameTheFile) {
  auto missing = ReadSafetensors("/nonexistent/model.safetensors");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/model.safetensors"));
}

TEST(SafetensorsTest, InvalidTensorsAreNotWritten) {
  TempDir directory;
  const std::string path = directory.File("bad.safetensors");
  auto duplicate = WriteSafetensors(path, {{"a", {1}, {1.0f}}, {"a", {1}, {2.0f}}});
  EXPECT_THAT(duplicate.message(), HasSubstr("tensor 'a' appears twice"));
  auto mismatch = WriteSafetensors(path, {{"a", {2, 2}, {1.0f}}});
  EXPECT_THAT(mismatch.message(), HasSubstr("has 1 values but its shape holds 4"));
  auto reserved = WriteSafetensors(path, {{"__metadata__", {1}, {1.0f}}});
  EXPECT_THAT(reserved.message(), HasSubstr("invalid tensor name"));
  EXPECT_FALSE(std::filesystem::exists(path));
  auto no_directory =
      WriteSafetensors(directory.File("missing/dir/x.safetensors"), SampleTensors());
  EXPECT_FALSE(no_directory.ok());
  EXPECT_THAT(no_directory.message(), HasSubstr("missing/dir/x.safetensors"));
}

TEST(SafetensorsTest, FailedWriteLeavesTheOldFileIntact) {
  TempDir directory;
  const std::string path = directory.File("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, SampleTensors()).ok());
  const std::string before = ReadBytes(path);
  // The temp file points at /dev/full, so every write fails with ENOSPC like a full disk.
  const std::string temp = DurableFileWriter::TempPathFor(path);
  std::filesystem::create_symlink("/dev/full", temp);
  auto status = WriteSafetensors(path, {{"other", {1}, {9.0f}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_EQ(ReadBytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(temp)));
}

}  // namespace
}  // namespace fsdpd
