// edge/tools/glsl_to_spirv.cc, the build tool that compiles matmul_cm2.comp through slang's
// glslang: a real shader becomes SPIR-V 1.6 words, bad input fails with a message and no output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

namespace {

using fsdpd::testing::CommandOutcome;

CommandOutcome RunTool(const std::string& arguments) {
  return fsdpd::testing::RunCommand(std::string(EDGE_GLSL_TOOL) + " " + arguments);
}

class GlslToSpirvTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }
  std::string Library() const { return EDGE_GLSLANG_LIBRARY; }
  fsdpd::testing::TempDir dir_{"glsl-to-spirv"};
};

TEST_F(GlslToSpirvTest, CompilesTheWorkgroupScopeMatmulToSpirv16Words) {
  const std::string out = dir_.File("cm2.inc");
  const CommandOutcome outcome = RunTool(Library() + " " + EDGE_SHADER_DIR + "/matmul_cm2.comp " +
                                         out + " -DBM=128 -DBN=256 -DBK=32");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  // The magic number, then version 1.6, as a braced list of words.
  EXPECT_EQ(text.str().rfind("{\n0x07230203,0x00010600,", 0), 0u) << text.str().substr(0, 80);
  EXPECT_EQ(text.str().substr(text.str().size() - 2), "}\n");
}

TEST_F(GlslToSpirvTest, BadInputFailsWithAMessageAndWritesNothing) {
  const std::string out = dir_.File("out.inc");
  CommandOutcome outcome = RunTool(Library() + " " + dir_.File("missing.comp") + " " + out);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("cannot read"), std::string::npos) << outcome.output;

  const std::string include = Write("include.comp", "#version 450\n#include \"x.glsl\"\n");
  outcome = RunTool(Library() + " " + include + " " + out);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("#include is not supported"), std::string::npos) << outcome.output;

  const std::string broken =
      Write("broken.comp", "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { x = ; }\n");
  outcome = RunTool(Library() + " " + broken + " " + out);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("compilation failed"), std::string::npos) << outcome.output;
  EXPECT_NE(outcome.output.find("ERROR"), std::string::npos) << outcome.output;

  outcome = RunTool(dir_.File("no-such-library.so") + " " + broken + " " + out);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("cannot load"), std::string::npos) << outcome.output;

  outcome = RunTool(Library() + " " + broken + " " + out + " NOT_A_DEFINE");
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("not a define"), std::string::npos) << outcome.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
