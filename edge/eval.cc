#include "edge/eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "edge/argmax.h"
#include "formats/mapped_file.h"

namespace fsdpd::edge {

absl::StatusOr<std::vector<int32_t>> ReadTextTokens(const std::string& path) {
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path, "text file"));
  return std::vector<int32_t>(file->data(), file->data() + file->size());
}

absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int token_bytes) {
  if (token_bytes != 2 && token_bytes != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token-bytes must be 2 or 4 (got ", token_bytes, ")"));
  }
  FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path, "tokens file"));
  if (file->size() % static_cast<size_t>(token_bytes) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tokens file '", path, "' is ", file->size(),
                                                   " bytes, not a multiple of --token-bytes ",
                                                   token_bytes));
  }
  std::vector<int32_t> tokens(file->size() / static_cast<size_t>(token_bytes));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (token_bytes == 2) {
      uint16_t value;
      std::memcpy(&value, file->data() + 2 * i, 2);
      tokens[i] = value;
    } else {
      uint32_t value;
      std::memcpy(&value, file->data() + 4 * i, 4);
      if (value > INT32_MAX) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokens file '", path, "': id ", value, " at index ", i, " is too large"));
      }
      tokens[i] = static_cast<int32_t>(value);
    }
  }
  return tokens;
}

absl::StatusOr<Perplexity> EvaluatePerplexity(ModelRunner& runner,
                                              const std::vector<int32_t>& tokens) {
  const int64_t batch = runner.batch();
  const int64_t seq = runner.seq();
  const int64_t windows = tokens.empty() ? 0 : (static_cast<int64_t>(tokens.size()) - 1) / seq;
  const int64_t batches = windows / batch;
  if (batches == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the input has ", tokens.size(),
                                                   " tokens; one batch needs batch × seq + 1 = ",
                                                   batch * seq + 1, " (lower --batch or --seq)"));
  }
  std::vector<int32_t> inputs(static_cast<size_t>(batch * seq));
  std::vector<int32_t> targets(inputs.size());
  double nll_sum = 0.0;
  auto start = std::chrono::steady_clock::now();
  for (int64_t b = 0; b < batches; ++b) {
    if (b == 1) start = std::chrono::steady_clock::now();  // the first batch tuned the blocks
    for (int64_t row = 0; row < batch; ++row) {
      const auto first = tokens.begin() + (b * batch + row) * seq;
      std::copy(first, first + seq, inputs.begin() + row * seq);
      std::copy(first + 1, first + seq + 1, targets.begin() + row * seq);
    }
    FSDPD_ASSIGN_OR_RETURN(double sum, runner.SumNll(inputs, targets));
    nll_sum += sum;
  }
  Perplexity result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.tokens = batches * batch * seq;
  result.timed_tokens = (batches > 1 ? batches - 1 : 1) * batch * seq;
  result.mean_nll = nll_sum / static_cast<double>(result.tokens);
  result.perplexity = std::exp(result.mean_nll);
  result.tokens_per_second = static_cast<double>(result.timed_tokens) / result.seconds;
  return result;
}

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view piece :
       absl::StrSplit(text, absl::ByAnyChar(", \t\n"), absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id) || id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", piece, "' is not a token id (a non-negative integer)"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<std::vector<int32_t>> Generate(ModelRunner& runner,
                                              const std::vector<int32_t>& prompt,
                                              const GenerateOptions& options) {
  const ExportedModelConfig& config = runner.config();
  if (!config.causal) {
    return absl::FailedPreconditionError(
        "generate needs a causal model (model.causal: true); this one attends to every "
        "position, so a next-token prediction would see the future during training");
  }
  if (runner.batch() != 1) return absl::InternalError("generate needs a runner of batch 1");
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (options.top_k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-k must be ≥ 1 (got ", options.top_k, ")"));
  }
  if (options.new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--new-tokens must be ≥ 0 (got ", options.new_tokens, ")"));
  }
  const int64_t seq = runner.seq();
  std::mt19937_64 random(options.seed);
  std::vector<int32_t> text = prompt;
  std::vector<float> logits;
  const bool greedy_on_device = options.kv_cache && options.top_k == 1 && options.pick_on_device;
  for (int64_t n = 0; n < options.new_tokens;) {
    const int64_t length = std::min<int64_t>(seq, static_cast<int64_t>(text.size()));
    if (greedy_on_device && n > 0 && runner.cached() < seq) {
      // Up to kGreedySteps tokens with one wait, as far as the window's end (then a prefill).
      const int64_t count =
          std::min({ModelRunner::kGreedySteps, options.new_tokens - n, seq - runner.cached()});
      std::vector<int32_t> picked;
      FSDPD_RETURN_IF_ERROR(runner.AppendGreedy(text.back(), count, &picked));
      for (int32_t token : picked) {
        text.push_back(token);
        if (options.on_token) options.on_token(token);
      }
      n += count;
      continue;
    }
    const float* row = nullptr;
    if (!options.kv_cache) {
      // The window holds the last (up to) seq tokens from position 0, padded after them; with
      // causal attention the padding cannot affect the earlier positions, and the prediction
      // is read at the text's last position.
      std::vector<int32_t> window(static_cast<size_t>(seq), 0);
      std::copy(text.end() - length, text.end(), window.begin());
      FSDPD_RETURN_IF_ERROR(runner.Logits(window, &logits));
      row = logits.data() + (length - 1) * config.vocab;
    } else if (n > 0 && runner.cached() < seq) {
      // The cache holds the text but its newest token, from the window's start.
      FSDPD_RETURN_IF_ERROR(runner.Append(text.back(), &logits));
      row = logits.data();
    } else {
      FSDPD_RETURN_IF_ERROR(
          runner.Prefill(std::vector<int32_t>(text.end() - length, text.end()), &logits));
      row = logits.data();
    }
    // Greedy: the rule Backend::Argmax follows on the device (the smallest of equal indices).
    int32_t next = GreedyPick(row, config.vocab);
    const int k = static_cast<int>(std::min<int64_t>(options.top_k, config.vocab));
    if (k > 1) {
      std::vector<int32_t> order(static_cast<size_t>(config.vocab));
      for (int32_t v = 0; v < config.vocab; ++v) order[static_cast<size_t>(v)] = v;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      std::vector<double> weights(static_cast<size_t>(k));
      for (int i = 0; i < k; ++i)
        weights[static_cast<size_t>(i)] = std::exp(row[order[i]] - row[order[0]]);
      std::discrete_distribution<int> pick(weights.begin(), weights.end());
      next = order[static_cast<size_t>(pick(random))];
    }
    text.push_back(next);
    if (options.on_token) options.on_token(next);
    ++n;
  }
  return text;
}

}  // namespace fsdpd::edge
