// fsdpd-edge: runs an exported fsdpd model (fsdpctl export) on any Vulkan device, or on the
// CPU reference backend. Separate from the daemon: it links neither gRPC, CUDA nor worker/.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "edge/cpu_backend.h"
#include "edge/eval.h"
#include "edge/vulkan_backend.h"

namespace fsdpd::edge {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "fsdpd-edge: %s\n", std::string(status.message()).c_str());
  return 1;
}

std::string Bytes(uint64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

int RunDevices() {
  absl::StatusOr<std::vector<VulkanDeviceInfo>> devices = ListVulkanDevices();
  if (!devices.ok()) return Fail(devices.status());
  for (const VulkanDeviceInfo& d : *devices) {
    std::printf("device %d: %s (%s), Vulkan %s, subgroup %u\n", d.index, d.name.c_str(),
                d.type.c_str(), d.api_version.c_str(), d.subgroup_size);
    for (size_t h = 0; h < d.heaps.size(); ++h) {
      const VulkanHeap& heap = d.heaps[h];
      std::printf("  heap %zu: %s%s%s%s\n", h, Bytes(heap.size).c_str(),
                  heap.device_local ? ", device-local" : "",
                  heap.host_visible ? ", host-visible" : "",
                  heap.device_local_host_visible ? " (zero-copy weights)" : "");
    }
    std::printf("  fp16: shaderFloat16 %s, storageBuffer16BitAccess %s\n",
                d.shader_float16 ? "yes" : "no", d.storage_buffer_16bit ? "yes" : "no");
    if (!d.nv_cooperative_matrix) {
      std::printf("  cooperative matrices: none (no VK_NV_cooperative_matrix)\n");
    } else {
      std::printf("  cooperative matrices (VK_NV_cooperative_matrix):\n");
      for (const std::string& shape : d.cooperative_matrix_shapes) {
        std::printf("    %s\n", shape.c_str());
      }
    }
  }
  return 0;
}

struct RunOptions {
  std::string model;
  std::string backend = "vulkan";
  int device = 0;
  std::string precision = "auto";
  std::string weights = "auto";
  std::string matvec = "auto";
  bool no_coop = false;
  bool staging = false;
  bool validate = false;
  int64_t batch = 1;
  int64_t seq = 128;
  int pipeline_threads = 0;
  bool op_times = false;
};

void AddRunOptions(CLI::App* command, RunOptions* options) {
  command->add_option("model", options->model, "exported model (.safetensors)")->required();
  command->add_option("--backend", options->backend, "vulkan or cpu (the fp32 reference)")
      ->check(CLI::IsMember({"vulkan", "cpu"}));
  command->add_option("--device", options->device, "Vulkan device index (fsdpd-edge devices)");
  command
      ->add_option("--precision", options->precision,
                   "auto (fp16 where the device supports it), fp16 or fp32")
      ->check(CLI::IsMember({"auto", "fp16", "fp32"}));
  command
      ->add_option("--weights", options->weights,
                   "auto (as --precision stores them) or int8 (the linear layers and the head "
                   "quantized on load: groups of 32, fp16 scales)")
      ->check(CLI::IsMember({"auto", "int8"}));
  command
      ->add_option("--matvec", options->matvec,
                   "decoding's matvec layout: auto (narrow on a CPU device, wide-2 elsewhere), "
                   "narrow, wide, wide-words (wide, with int8 weights read a word a lane), or "
                   "wide-2 and wide-4 (wide, 2 or 4 output columns a subgroup)")
      ->check(CLI::IsMember({"auto", "narrow", "wide", "wide-words", "wide-2", "wide-4"}));
  command->add_flag("--no-coop-matrix", options->no_coop,
                    "use the tiled matmul even where cooperative matrices exist");
  command->add_flag("--staging", options->staging,
                    "upload weights, and read and write activations, through a staging buffer even "
                    "where zero-copy is possible");
  command->add_flag("--validate", options->validate,
                    "enable VK_LAYER_KHRONOS_validation; fail if it reports an error");
  command->add_option("--seq", options->seq, "tokens per sequence");
  command
      ->add_option("--pipeline-threads", options->pipeline_threads,
                   "threads that build the shader pipelines at start (default 0: one per core)")
      ->check(CLI::Range(0, 1024));
  command->add_flag("--op-times", options->op_times,
                    "time every GPU command and print the GPU time of each shader at the end "
                    "(vulkan)");
}

// The backend, the model on it, and a runner; prints which paths run.
struct Loaded {
  std::unique_ptr<Backend> backend;
  VulkanBackend* vulkan = nullptr;
  std::unique_ptr<ModelRunner> runner;
};

absl::StatusOr<Loaded> Load(const RunOptions& options, int64_t batch) {
  if (options.op_times && options.backend != "vulkan") {
    return absl::InvalidArgumentError(
        "--op-times times the commands of a Vulkan device; --backend cpu runs none");
  }
  absl::StatusOr<HostModel> model = LoadHostModel(options.model);
  if (!model.ok()) return model.status();
  Loaded loaded;
  if (options.backend == "cpu") {
    loaded.backend = CreateCpuBackend();
  } else {
    VulkanOptions vulkan;
    vulkan.device = options.device;
    vulkan.precision = options.precision == "fp16"   ? VulkanOptions::Precision::kFp16
                       : options.precision == "fp32" ? VulkanOptions::Precision::kFp32
                                                     : VulkanOptions::Precision::kAuto;
    vulkan.matvec_layout = options.matvec == "narrow" ? VulkanOptions::MatvecLayout::kNarrow
                           : options.matvec == "wide" ? VulkanOptions::MatvecLayout::kWide
                           : options.matvec == "wide-words"
                               ? VulkanOptions::MatvecLayout::kWideWords
                           : options.matvec == "wide-2" ? VulkanOptions::MatvecLayout::kWide2
                           : options.matvec == "wide-4" ? VulkanOptions::MatvecLayout::kWide4
                                                        : VulkanOptions::MatvecLayout::kAuto;
    vulkan.cooperative_matrix = !options.no_coop;
    vulkan.force_staging = options.staging;
    vulkan.validation = options.validate;
    vulkan.pipeline_threads = options.pipeline_threads;
    vulkan.op_times = options.op_times;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(vulkan);
    if (!backend.ok()) return backend.status();
    // The first start on a device can take minutes: the driver compiles every shader then.
    std::fprintf(stderr, "fsdpd-edge: device opened and pipelines built in %.3f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    loaded.vulkan = backend->get();
    loaded.backend = std::move(*backend);
  }
  const ExportedModelConfig& c = model->config;
  std::printf("model %s: dim %lld, layers %lld, heads %lld, vocab %lld, ffn_mult %lld, %s%s\n",
              options.model.c_str(), static_cast<long long>(c.dim),
              static_cast<long long>(c.layers), static_cast<long long>(c.heads),
              static_cast<long long>(c.vocab), static_cast<long long>(c.ffn_mult),
              c.causal ? "causal" : "no mask", c.final_norm ? ", final norm" : "");
  const auto start = std::chrono::steady_clock::now();
  const bool int8 = options.weights == "int8";
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner =
      ModelRunner::Create(*model, loaded.backend.get(), batch, options.seq,
                          int8 ? WeightFormat::kInt8 : WeightFormat::kAuto);
  if (!runner.ok()) return runner.status();
  // After the weights: the backend builds its int8 pipelines with the first int8 one.
  std::printf("backend: %s\n", loaded.backend->Describe().c_str());
  std::printf("weights placed in %.3f s: %lld bytes (%.1f MiB) on the %s, %s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              static_cast<long long>((*runner)->weight_bytes()),
              static_cast<double>((*runner)->weight_bytes()) / (1024.0 * 1024.0),
              loaded.vulkan != nullptr ? "device" : "host",
              int8 ? "int8 linear layers and head (groups of 32, fp16 scales)"
                   : "as the backend stores weights");
  loaded.runner = std::move(*runner);
  return loaded;
}

// With --op-times: the GPU time of each shader over the run, per `units` of `unit`.
void PrintOpTimes(const RunOptions& options, const Loaded& loaded, double wall_seconds,
                  int64_t units, const std::string& unit) {
  if (!options.op_times || loaded.vulkan == nullptr) return;
  std::fprintf(stderr, "fsdpd-edge: %s",
               FormatOpTimes(loaded.vulkan->op_times(), wall_seconds, units, unit,
                             loaded.vulkan->host_times())
                   .c_str());
}

int CheckValidation(const Loaded& loaded) {
  if (loaded.vulkan == nullptr) return 0;
  const int errors = loaded.vulkan->validation_errors();
  if (errors == 0) return 0;
  std::fprintf(stderr, "fsdpd-edge: %d Vulkan validation error(s); the last: %s\n", errors,
               loaded.vulkan->last_validation_error().c_str());
  return 1;
}

int RunEval(const RunOptions& options, const std::string& text, const std::string& tokens_path,
            int token_bytes) {
  absl::StatusOr<std::vector<int32_t>> tokens =
      !text.empty() ? ReadTextTokens(text) : ReadTokenFile(tokens_path, token_bytes);
  if (!tokens.ok()) return Fail(tokens.status());
  absl::StatusOr<Loaded> loaded = Load(options, options.batch);
  if (!loaded.ok()) return Fail(loaded.status());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Perplexity> result = EvaluatePerplexity(*loaded->runner, *tokens);
  if (!result.ok()) return Fail(result.status());
  // Every batch, the untimed first one (which picks the matmul blocks) included.
  PrintOpTimes(options, *loaded,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
               result->tokens, "token");
  std::printf("perplexity %.6f (mean nll %.6f nats over %lld tokens)\n", result->perplexity,
              result->mean_nll, static_cast<long long>(result->tokens));
  std::printf("forward %.1f tokens/s (%.3f s over %lld tokens%s)\n", result->tokens_per_second,
              result->seconds, static_cast<long long>(result->timed_tokens),
              result->timed_tokens < result->tokens
                  ? "; the first batch, which also picks the matmul blocks, is not timed"
                  : "");
  return CheckValidation(*loaded);
}

// The prompt as token ids: --prompt-ids as written, or --prompt's bytes.
absl::StatusOr<std::vector<int32_t>> PromptTokens(const std::string& prompt,
                                                  const std::string& prompt_ids) {
  if (!prompt_ids.empty()) return ParseTokenIds(prompt_ids);
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  for (int32_t& token : tokens) token = static_cast<unsigned char>(token);
  return tokens;
}

int RunGenerate(const RunOptions& options, const std::string& prompt, const std::string& prompt_ids,
                const GenerateOptions& generate, int warmup) {
  absl::StatusOr<std::vector<int32_t>> tokens = PromptTokens(prompt, prompt_ids);
  if (!tokens.ok()) return Fail(tokens.status());
  absl::StatusOr<Loaded> loaded = Load(options, 1);
  if (!loaded.ok()) return Fail(loaded.status());
  // Untimed runs of the same generation first, as llama-bench warms up before its tg: the first
  // use of each shape and a GPU's clocks, which a run of 0.2 s otherwise measures too.
  for (int run = 0; run < warmup; ++run) {
    absl::StatusOr<std::vector<int32_t>> discarded = Generate(*loaded->runner, *tokens, generate);
    if (!discarded.ok()) return Fail(discarded.status());
  }
  if (loaded->vulkan != nullptr) loaded->vulkan->ResetOpTimes();
  // The text streams out as it is generated: byte-level models as bytes (any byte, NUL
  // included), any other vocabulary as ids.
  const bool bytes = loaded->runner->config().vocab <= 256;
  auto print = [bytes](int32_t token) {
    if (bytes) {
      std::fputc(token, stdout);
    } else {
      std::printf("%d ", token);
    }
    std::fflush(stdout);
  };
  for (int32_t token : *tokens) print(token);
  GenerateOptions streamed = generate;
  // The time of the first new token: what follows it is decoding alone (no prefill, no first use
  // of a shape), the rate llama-bench's tg reports.
  std::chrono::steady_clock::time_point first_token;
  int64_t streamed_tokens = 0;
  streamed.on_token = [&](int32_t token) {
    if (streamed_tokens++ == 0) first_token = std::chrono::steady_clock::now();
    print(token);
  };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<int32_t>> text = Generate(*loaded->runner, *tokens, streamed);
  const auto end = std::chrono::steady_clock::now();
  std::printf("\n");
  if (!text.ok()) return Fail(text.status());
  const double seconds = std::chrono::duration<double>(end - start).count();
  if (streamed_tokens > 1) {
    const double decoding = std::chrono::duration<double>(end - first_token).count();
    std::fprintf(stderr, "fsdpd-edge: decoding %.1f tokens/s (tokens 2 to %lld, %.3f s)\n",
                 static_cast<double>(streamed_tokens - 1) / decoding,
                 static_cast<long long>(streamed_tokens), decoding);
  }
  // Wall time of the whole call: the prompt's prefill and the first use of each matmul shape
  // (which picks its block) included.
  std::fprintf(stderr, "fsdpd-edge: %lld tokens in %.3f s (%.1f tokens/s, %s)\n",
               static_cast<long long>(generate.new_tokens), seconds,
               static_cast<double>(generate.new_tokens) / seconds,
               generate.kv_cache ? "qkv cache" : "a forward over the window per token");
  PrintOpTimes(options, *loaded, seconds, generate.new_tokens, "token");
  return CheckValidation(*loaded);
}

}  // namespace
}  // namespace fsdpd::edge

int main(int argc, char** argv) {
  using namespace fsdpd::edge;
  CLI::App app{"fsdpd-edge: run an exported fsdpd model on a Vulkan device or the CPU"};
  app.require_subcommand(1);
  app.add_subcommand("devices", "list Vulkan devices: type, heaps, fp16, cooperative matrices");

  RunOptions eval_options;
  std::string text, tokens_path;
  int token_bytes = 2;
  CLI::App* eval = app.add_subcommand("eval", "perplexity and forward tokens/s over a file");
  AddRunOptions(eval, &eval_options);
  auto* text_option = eval->add_option("--text", text, "text file (one token per byte)");
  auto* tokens_option = eval->add_option("--tokens", tokens_path, "flat uint16/uint32 token ids");
  text_option->excludes(tokens_option);
  eval->add_option("--token-bytes", token_bytes, "width of --tokens ids: 2 or 4");
  eval->add_option("--batch", eval_options.batch, "sequences per forward");

  RunOptions generate_options;
  std::string prompt;
  GenerateOptions generate;
  CLI::App* gen = app.add_subcommand("generate", "continue a prompt (causal byte-level models)");
  AddRunOptions(gen, &generate_options);
  std::string prompt_ids;
  auto* prompt_option = gen->add_option("--prompt", prompt, "prompt text (one token per byte)");
  gen->add_option(
         "--prompt-ids", prompt_ids,
         "the prompt as token ids (\"17 4 230\"), for models whose vocabulary is not bytes")
      ->excludes(prompt_option);
  gen->add_option("--new-tokens", generate.new_tokens, "tokens to generate (default 64)");
  gen->add_option("--top-k", generate.top_k, "sample among the k likeliest (1: greedy)");
  gen->add_option("--seed", generate.seed, "sampling seed");
  int warmup = 0;
  gen->add_option("--warmup", warmup, "untimed generations of the same prompt first (default 0)")
      ->check(CLI::Range(0, 100));
  bool no_cache = false;
  gen->add_flag("--no-kv-cache", no_cache,
                "a forward over the whole window for every token (the same predictions, slower)");
  bool pick_on_host = false;
  gen->add_flag("--pick-on-host", pick_on_host,
                "greedy: read every token's logits back and pick on the host (the same tokens; "
                "by default the device picks and the host reads 16 picks at a time)");

  CLI11_PARSE(app, argc, argv);
  if (app.got_subcommand("devices")) return RunDevices();
  if (app.got_subcommand("eval")) {
    if (text.empty() && tokens_path.empty()) {
      std::fprintf(stderr, "fsdpd-edge: eval needs --text FILE or --tokens FILE\n");
      return 1;
    }
    return RunEval(eval_options, text, tokens_path, token_bytes);
  }
  generate.kv_cache = !no_cache;
  generate.pick_on_device = !pick_on_host;
  if (prompt.empty() && prompt_ids.empty()) {
    std::fprintf(stderr, "fsdpd-edge: generate needs --prompt TEXT or --prompt-ids IDS\n");
    return 1;
  }
  return RunGenerate(generate_options, prompt, prompt_ids, generate, warmup);
}
