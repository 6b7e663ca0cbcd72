// Build tool: GLSL compute shader → SPIR-V 1.6 as a braced list of words (glslc's -mfmt=c), for
// the shaders Debian 12's glslc cannot compile (GL_NV_cooperative_matrix2). It drives the
// glslang inside slang's libslang-glslang (shipped in the slangpy wheel) through its C entry
// point, glslang_compile_1_2, loaded at run time.
//
//   edge_glsl_to_spirv LIBRARY SOURCE OUTPUT [-DNAME=VALUE ...]
//
// The defines are inserted after the #version line. An `#include "name"` line is replaced by the
// file of that name beside the source (as glslc resolves it; nested ones too), with #line
// directives that keep diagnostics' line numbers those of the including file after it.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

// The request layout of slang's glslang wrapper, version 1.2 (a stable C ABI it versions by
// size): what to compile, where diagnostics and output go, and for which SPIR-V.
using OutputFunc = void (*)(const void* data, size_t size, void* user);
struct SpirvVersion {
  int major, minor, patch;
};
struct CompileRequest {
  size_t size_in_bytes;
  const char* source_path;
  const void* input_begin;
  const void* input_end;
  OutputFunc diagnostic_func;
  void* diagnostic_user_data;
  OutputFunc output_func;
  void* output_user_data;
  int stage;                    // SLANG_STAGE_COMPUTE
  unsigned action;              // GLSLANG_ACTION_COMPILE_GLSL_TO_SPIRV
  unsigned optimization_level;  // SLANG_OPTIMIZATION_LEVEL_HIGH
  unsigned debug_info_type;     // none
  const char* spirv_target_name;
  SpirvVersion spirv_version;
  const char* entry_point_name;
};
constexpr int kStageCompute = 6;
constexpr unsigned kCompileGlslToSpirv = 0;
constexpr unsigned kOptimizeHigh = 2;

void Append(const void* data, size_t size, void* user) {
  static_cast<std::string*>(user)->append(static_cast<const char*>(data), size);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "edge_glsl_to_spirv: %s\n", message.c_str());
  return 1;
}

// `text` with each `#include "name"` line replaced by the file `directory`/name, expanded in
// turn; false with *error set for a file that cannot be read or includes nested too deep (a
// cycle).
bool ExpandIncludes(const std::string& text, const std::string& directory, int depth,
                    std::string* out, std::string* error) {
  if (depth > 16) {
    *error = "#include nested deeper than 16 (a cycle?)";
    return false;
  }
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    const size_t hash = line.find_first_not_of(" \t");
    if (hash == std::string::npos || line.compare(hash, 8, "#include") != 0) {
      *out += line + "\n";
      continue;
    }
    const size_t open = line.find('"', hash + 8);
    const size_t close = open == std::string::npos ? open : line.find('"', open + 1);
    if (close == std::string::npos) {
      *error = "not an #include \"name\" line: " + line;
      return false;
    }
    const std::string path = directory + "/" + line.substr(open + 1, close - open - 1);
    std::ifstream in(path);
    if (!in) {
      *error = "cannot read " + path;
      return false;
    }
    std::stringstream included;
    included << in.rdbuf();
    *out += "#line 1\n";
    if (!ExpandIncludes(included.str(), directory, depth + 1, out, error)) return false;
    *out += "#line " + std::to_string(number + 1) + "\n";
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return Fail("usage: edge_glsl_to_spirv LIBRARY SOURCE OUTPUT [-DNAME=VALUE ...]");
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return Fail(std::string("cannot load ") + argv[1] + ": " + dlerror());
  using CompileFunc = int (*)(CompileRequest*);
  auto compile = reinterpret_cast<CompileFunc>(dlsym(library, "glslang_compile_1_2"));
  if (compile == nullptr) return Fail(std::string(argv[1]) + " has no glslang_compile_1_2");
  std::ifstream in(argv[2]);
  if (!in) return Fail(std::string("cannot read ") + argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  const std::string path = argv[2];
  const size_t slash = path.rfind('/');
  std::string source, error;
  if (!ExpandIncludes(text.str(), slash == std::string::npos ? "." : path.substr(0, slash), 0,
                      &source, &error)) {
    return Fail(path + ": " + error);
  }
  const size_t version_end = source.find('\n');
  if (source.rfind("#version", 0) != 0 || version_end == std::string::npos) {
    return Fail(std::string(argv[2]) + ": the first line must be #version");
  }
  std::string defines;
  for (int i = 4; i < argc; ++i) {
    if (std::strncmp(argv[i], "-D", 2) != 0) return Fail(std::string("not a define: ") + argv[i]);
    std::string define = argv[i] + 2;
    const size_t equals = define.find('=');
    if (equals != std::string::npos) define[equals] = ' ';
    defines += "#define " + define + "\n";
  }
  // The line directive keeps diagnostics' line numbers those of the source file.
  source.insert(version_end + 1, defines + "#line 2\n");

  std::string spirv, diagnostics;
  CompileRequest request{};
  request.size_in_bytes = sizeof(request);
  request.source_path = argv[2];
  request.input_begin = source.data();
  request.input_end = source.data() + source.size();
  request.diagnostic_func = Append;
  request.diagnostic_user_data = &diagnostics;
  request.output_func = Append;
  request.output_user_data = &spirv;
  request.stage = kStageCompute;
  request.action = kCompileGlslToSpirv;
  request.optimization_level = kOptimizeHigh;
  request.spirv_target_name = "vk1.1_spirv1.4";
  request.spirv_version = {1, 6, 0};
  request.entry_point_name = "main";
  const int status = compile(&request);
  if (!diagnostics.empty()) std::fprintf(stderr, "%s", diagnostics.c_str());
  if (status != 0 || spirv.empty() || spirv.size() % 4 != 0) {
    return Fail(std::string(argv[2]) + ": compilation failed");
  }
  std::ofstream out(argv[3]);
  out << "{";
  for (size_t i = 0; i < spirv.size(); i += 4) {
    uint32_t word;
    std::memcpy(&word, spirv.data() + i, 4);
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", word);
    out << (i == 0 ? "" : ",") << (i % 32 == 0 ? "\n" : "") << hex;
  }
  out << "}\n";
  if (!out) return Fail(std::string("cannot write ") + argv[3]);
  return 0;
}
