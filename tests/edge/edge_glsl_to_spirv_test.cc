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

// `#include "name"` is the file beside the source, nested includes too (as glslc resolves them),
// and a diagnostic after an include still names the including file's line.
TEST_F(GlslToSpirvTest, IncludesAreExpandedAndLineNumbersKept) {
  const std::string out = dir_.File("int8.inc");
  CommandOutcome outcome =
      RunTool(Library() + " " + EDGE_SHADER_DIR + "/matmul_cm2.comp " + out +
              " -DBM=128 -DBN=256 -DBK=32 -DX_F16 -DSTAGED -DWEIGHTS_INT8");  // int8.glsl
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_TRUE(std::filesystem::exists(out));

  Write("inner.glsl", "const float kInner = 2.0;\n");
  Write("outer.glsl", "#include \"inner.glsl\"\nconst float kOuter = kInner * 3.0;\n");
  const std::string nested = Write(
      "nested.comp",
      "#version 450\nlayout(local_size_x = 1) in;\n#include \"outer.glsl\"\n"
      "layout(std430, binding = 0) buffer B { float b[]; };\nvoid main() { b[0] = kOuter; }\n");
  outcome = RunTool(Library() + " " + nested + " " + dir_.File("nested.inc"));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;

  const std::string broken = Write("broken_after.comp",
                                   "#version 450\nlayout(local_size_x = 1) in;\n#include "
                                   "\"outer.glsl\"\nvoid main() { x = ; }\n");
  outcome = RunTool(Library() + " " + broken + " " + dir_.File("broken.inc"));
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find(":4:"), std::string::npos) << outcome.output;  // main's line
}

TEST_F(GlslToSpirvTest, BadInputFailsWithAMessageAndWritesNothing) {
  const std::string out = dir_.File("out.inc");
  CommandOutcome outcome = RunTool(Library() + " " + dir_.File("missing.comp") + " " + out);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("cannot read"), std::string::npos) << outcome.output;

  const std::string include = Write("include.comp", "#version 450\n#include \"x.glsl\"\n");
  outcome = RunTool(Library() + " " + include + " " + out);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("cannot read " + dir_.File("x.glsl")), std::string::npos)
      << outcome.output;

  Write("self.glsl", "#include \"self.glsl\"\n");
  const std::string cycle = Write("cycle.comp", "#version 450\n#include \"self.glsl\"\n");
  outcome = RunTool(Library() + " " + cycle + " " + out);
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_NE(outcome.output.find("nested deeper than 16"), std::string::npos) << outcome.output;

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
