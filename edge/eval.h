// What the CLI does with a ModelRunner: perplexity over a token stream and text generation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/model.h"

namespace fsdpd::edge {

// A text file is one token per byte (the engine's `text` source); a tokens file is flat
// little-endian uint16 or uint32 ids (token_bytes 2 or 4), as for training.
absl::StatusOr<std::vector<int32_t>> ReadTextTokens(const std::string& path);
absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int token_bytes);
// Token ids written out ("17 4 230" or "17,4,230"), for prompting a model whose vocabulary is
// not bytes. Anything but non-negative integers is an error naming it; the ids are checked
// against the model's vocabulary when they run.
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text);

struct Perplexity {
  double mean_nll = 0.0;    // nats per predicted token
  double perplexity = 0.0;  // exp(mean_nll)
  int64_t tokens = 0;       // predicted tokens (windows × seq)
  // The rate is timed over the forward passes after the first where there are two or more: the
  // first one also picks the matmul blocks (MatmulTuner) and would understate the rate.
  int64_t timed_tokens = 0;
  double seconds = 0.0;  // those forward passes only (not loading)
  double tokens_per_second = 0.0;
};

// Cuts the stream into windows of seq + 1 tokens overlapping by one (inputs, next-token
// targets), the training data loader's rule, batch windows per forward; a last partial batch
// is dropped. Fewer than batch·seq + 1 tokens is an error.
absl::StatusOr<Perplexity> EvaluatePerplexity(ModelRunner& runner,
                                              const std::vector<int32_t>& tokens);

struct GenerateOptions {
  int64_t new_tokens = 64;
  int top_k = 1;  // 1: greedy
  uint64_t seed = 0;
  // Decode through the runner's cache of qkv rows (one position a token) instead of a whole
  // forward over the window for every token. The predictions are the same either way.
  bool kv_cache = true;
  // Greedy decoding through the cache picks each token on the device (Backend::Argmax) and
  // reads the picks back every ModelRunner::kGreedySteps tokens, so the device never waits
  // for the host between tokens. The same tokens as the host's pick, which false keeps.
  bool pick_on_device = true;
  // Called with each new token as soon as it is chosen (the CLI streams the text so).
  std::function<void(int32_t)> on_token;
};

// Appends new_tokens to prompt (causal models only, a runner of batch 1). Each token is
// predicted from the text's last runner.seq() tokens (or all of it while it is shorter), at
// positions from 0. With the cache, a token costs one position while the text fits the window;
// once it does not, the window slides and every token costs a prefill of seq positions (the
// model has no positional encoding to shift, so the cached rows change with the window's start).
absl::StatusOr<std::vector<int32_t>> Generate(ModelRunner& runner,
                                              const std::vector<int32_t>& prompt,
                                              const GenerateOptions& options);

}  // namespace fsdpd::edge
