// edge/tools/glsl_to_spirv.cc, the build tool that compiles matmul_cm2.comp through slang's
// glslang: a real shader becomes SPIR-V 1.6 words, bad input fails with a message and no output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr
};

Outcome RunTool(const std::string& arguments) {
  const std::string command = std::string(EDGE_GLSL_TOOL) + " " + arguments + " 2>&1";
  Outcome outcome;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return outcome;
  char buffer[4096];
  size_t read;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe)) > 0) outcome.output.append(buffer, read);
  outcome.status = pclose(pipe);
  return outcome;
}

class GlslToSpirvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("edge_glsl_to_spirv_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::string Library() const { return EDGE_GLSLANG_LIBRARY; }
  std::filesystem::path dir_;
};

TEST_F(GlslToSpirvTest, CompilesTheWorkgroupScopeMatmulToSpirv16Words) {
  const std::string out = (dir_ / "cm2.inc").string();
  const Outcome outcome = RunTool(Library() + " " + EDGE_SHADER_DIR + "/matmul_cm2.comp " + out +
                                  " -DBM=128 -DBN=256 -DBK=32");
  ASSERT_EQ(outcome.status, 0) << outcome.output;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  // The magic number, then version 1.6, as a braced list of words.
  EXPECT_EQ(text.str().rfind("{\n0x07230203,0x00010600,", 0), 0u) << text.str().substr(0, 80);
  EXPECT_EQ(text.str().substr(text.str().size() - 2), "}\n");
}

TEST_F(GlslToSpirvTest, BadInputFailsWithAMessageAndWritesNothing) {
  const std::string out = (dir_ / "out.inc").string();
  Outcome outcome = RunTool(Library() + " " + (dir_ / "missing.comp").string() + " " + out);
  EXPECT_NE(outcome.status, 0);
  EXPECT_NE(outcome.output.find("cannot read"), std::string::npos) << outcome.output;

  const std::string include = Write("include.comp", "#version 450\n#include \"x.glsl\"\n");
  outcome = RunTool(Library() + " " + include + " " + out);
  EXPECT_NE(outcome.status, 0);
  EXPECT_NE(outcome.output.find("#include is not supported"), std::string::npos) << outcome.output;

  const std::string broken =
      Write("broken.comp", "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { x = ; }\n");
  outcome = RunTool(Library() + " " + broken + " " + out);
  EXPECT_NE(outcome.status, 0);
  EXPECT_NE(outcome.output.find("compilation failed"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("ERROR"), std::string::npos) << outcome.output;

  outcome = RunTool((dir_ / "no-such-library.so").string() + " " + broken + " " + out);
  EXPECT_NE(outcome.status, 0);
  EXPECT_NE(outcome.output.find("cannot load"), std::string::npos) << outcome.output;

  outcome = RunTool(Library() + " " + broken + " " + out + " NOT_A_DEFINE");
  EXPECT_NE(outcome.status, 0);
  EXPECT_NE(outcome.output.find("not a define"), std::string::npos) << outcome.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
