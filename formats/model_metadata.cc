#include "formats/model_metadata.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fsdpd {
namespace {

absl::Status MetadataError(const std::string& source, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
}

absl::StatusOr<int64_t> PositiveInteger(const std::map<std::string, std::string>& metadata,
                                        const std::string& key, const std::string& source) {
  const std::string& text = metadata.at(key);
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value <= 0) {
    return MetadataError(source, absl::StrCat("__metadata__ '", key,
                                              "' must be a positive integer (got '", text, "')"));
  }
  return value;
}

absl::StatusOr<bool> Boolean(const std::map<std::string, std::string>& metadata,
                             const std::string& key, const std::string& source) {
  const std::string& text = metadata.at(key);
  if (text == "true") return true;
  if (text == "false") return false;
  return MetadataError(
      source, absl::StrCat("__metadata__ '", key, "' must be true or false (got '", text, "')"));
}

}  // namespace

void AppendModelMetadata(const ExportedModelConfig& config,
                         std::map<std::string, std::string>* metadata) {
  (*metadata)["architecture"] = kMiniLlmArchitecture;
  (*metadata)["vocab"] = absl::StrCat(config.vocab);
  (*metadata)["dim"] = absl::StrCat(config.dim);
  (*metadata)["layers"] = absl::StrCat(config.layers);
  (*metadata)["heads"] = absl::StrCat(config.heads);
  (*metadata)["ffn_mult"] = absl::StrCat(config.ffn_mult);
  (*metadata)["causal"] = config.causal ? "true" : "false";
  (*metadata)["final_norm"] = config.final_norm ? "true" : "false";
  (*metadata)["norm_eps"] = absl::StrFormat("%.17g", config.norm_eps);
}

void AppendLlamaMetadata(const ExportedLlamaConfig& config,
                         std::map<std::string, std::string>* metadata) {
  (*metadata)["architecture"] = kLlamaArchitecture;
  (*metadata)["arch"] = "llama";
  (*metadata)["vocab"] = absl::StrCat(config.vocab);
  (*metadata)["dim"] = absl::StrCat(config.dim);
  (*metadata)["layers"] = absl::StrCat(config.layers);
  (*metadata)["heads"] = absl::StrCat(config.heads);
  (*metadata)["kv_heads"] = absl::StrCat(config.kv_heads);
  (*metadata)["ffn_dim"] = absl::StrCat(config.ffn_dim);
  (*metadata)["rope_theta"] = absl::StrFormat("%.17g", config.rope_theta);
  (*metadata)["tie_embeddings"] = config.tie_embeddings ? "true" : "false";
  (*metadata)["norm_eps"] = absl::StrFormat("%.17g", config.norm_eps);
}

absl::StatusOr<ExportedModelConfig> ParseModelMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& source) {
  static const char* const kKeys[] = {"architecture", "vocab",  "dim",        "layers",  "heads",
                                      "ffn_mult",     "causal", "final_norm", "norm_eps"};
  // Another architecture (a Llama export) has other keys: name it rather than the keys it lacks.
  auto architecture = metadata.find("architecture");
  if (architecture != metadata.end() && architecture->second != kMiniLlmArchitecture) {
    return MetadataError(source,
                         absl::StrCat("__metadata__ 'architecture' is '", architecture->second,
                                      "', expected '", kMiniLlmArchitecture, "'"));
  }
  std::vector<std::string> missing;
  for (const char* key : kKeys) {
    if (metadata.count(key) == 0) missing.push_back(key);
  }
  if (missing.size() == std::size(kKeys)) {
    return MetadataError(source,
                         "the file has no model config in its __metadata__ (export it with "
                         "a current fsdpd: `fsdpctl export` writes the model section of the "
                         "job spec there)");
  }
  if (!missing.empty()) {
    return MetadataError(
        source, absl::StrCat("__metadata__ lacks the model key(s) ", absl::StrJoin(missing, ", ")));
  }
  if (metadata.at("architecture") != kMiniLlmArchitecture) {
    return MetadataError(
        source, absl::StrCat("__metadata__ 'architecture' is '", metadata.at("architecture"),
                             "', expected '", kMiniLlmArchitecture, "'"));
  }
  ExportedModelConfig config;
  absl::StatusOr<int64_t> value = PositiveInteger(metadata, "vocab", source);
  if (!value.ok()) return value.status();
  config.vocab = *value;
  if (value = PositiveInteger(metadata, "dim", source); !value.ok()) return value.status();
  config.dim = *value;
  if (value = PositiveInteger(metadata, "layers", source); !value.ok()) return value.status();
  config.layers = *value;
  if (value = PositiveInteger(metadata, "heads", source); !value.ok()) return value.status();
  config.heads = *value;
  if (value = PositiveInteger(metadata, "ffn_mult", source); !value.ok()) return value.status();
  config.ffn_mult = *value;
  absl::StatusOr<bool> flag = Boolean(metadata, "causal", source);
  if (!flag.ok()) return flag.status();
  config.causal = *flag;
  if (flag = Boolean(metadata, "final_norm", source); !flag.ok()) return flag.status();
  config.final_norm = *flag;
  const std::string& eps = metadata.at("norm_eps");
  if (!absl::SimpleAtod(eps, &config.norm_eps) || !std::isfinite(config.norm_eps) ||
      config.norm_eps <= 0.0) {
    return MetadataError(
        source,
        absl::StrCat("__metadata__ 'norm_eps' must be a positive number (got '", eps, "')"));
  }
  if (config.dim % config.heads != 0) {
    return MetadataError(source, absl::StrCat("__metadata__ 'dim' ", config.dim,
                                              " is not a multiple of 'heads' ", config.heads));
  }
  return config;
}

std::vector<ExportedTensorShape> ExportedModelTensors(const ExportedModelConfig& c) {
  const int64_t ffn = c.ffn_mult * c.dim;
  std::vector<ExportedTensorShape> tensors;
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const std::string prefix = absl::StrCat("layers.", layer, ".");
    tensors.push_back({prefix + "norm1.weight", {c.dim}});
    tensors.push_back({prefix + "attn.in_proj_weight", {3 * c.dim, c.dim}});
    tensors.push_back({prefix + "attn.in_proj_bias", {3 * c.dim}});
    tensors.push_back({prefix + "attn.out_proj.weight", {c.dim, c.dim}});
    tensors.push_back({prefix + "attn.out_proj.bias", {c.dim}});
    tensors.push_back({prefix + "norm2.weight", {c.dim}});
    tensors.push_back({prefix + "ffn.0.weight", {ffn, c.dim}});
    tensors.push_back({prefix + "ffn.2.weight", {c.dim, ffn}});
  }
  tensors.push_back({"embed.weight", {c.vocab, c.dim}});
  tensors.push_back({"head.weight", {c.vocab, c.dim}});
  if (c.final_norm) tensors.push_back({"norm.weight", {c.dim}});
  return tensors;
}

}  // namespace fsdpd
