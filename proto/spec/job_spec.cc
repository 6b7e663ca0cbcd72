#include "proto/spec/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fsdpd {
namespace {

// Limits that keep a spec within what one coordinator and its workers can hold. A spec
// beyond them is a typo or an attack, not a job.
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxSeqLen = 1 << 20;
constexpr int64_t kMaxBatch = 1 << 16;
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr int kMaxWorldSize = 65536;
constexpr size_t kMaxNameLength = 128;
constexpr size_t kMaxPathLength = 4096;

// A field setter parses one YAML scalar into the spec, or explains why it cannot.
using Setter = std::function<absl::Status(const YAML::Node&, v1::JobSpec*)>;

absl::Status TypeError(const std::string& field, const YAML::Node& node, const char* expected) {
  std::string got = node.IsScalar()     ? "'" + node.Scalar() + "'"
                    : node.IsSequence() ? "a list"
                    : node.IsMap()      ? "a mapping"
                                        : "nothing";
  return absl::InvalidArgumentError(absl::StrCat(field, ": expected ", expected, ", got ", got));
}

template <typename T>
absl::StatusOr<T> Scalar(const std::string& field, const YAML::Node& node, const char* expected) {
  if (!node.IsScalar()) return TypeError(field, node, expected);
  T value;
  if (!YAML::convert<T>::decode(node, value)) return TypeError(field, node, expected);
  return value;
}

template <typename T>
Setter Number(const std::string& field, std::function<void(v1::JobSpec*, T)> set) {
  return [field, set](const YAML::Node& node, v1::JobSpec* spec) -> absl::Status {
    const char* expected = std::is_integral_v<T> ? "an integer" : "a number";
    absl::StatusOr<T> value = Scalar<T>(field, node, expected);
    if (!value.ok()) return value.status();
    set(spec, *value);
    return absl::OkStatus();
  };
}

Setter Text(const std::string& field, std::function<void(v1::JobSpec*, std::string)> set) {
  return [field, set](const YAML::Node& node, v1::JobSpec* spec) -> absl::Status {
    if (node.IsNull()) {
      set(spec, "");
      return absl::OkStatus();
    }
    absl::StatusOr<std::string> value = Scalar<std::string>(field, node, "a string");
    if (!value.ok()) return value.status();
    set(spec, *value);
    return absl::OkStatus();
  };
}

Setter Flag(const std::string& field, std::function<void(v1::JobSpec*, bool)> set) {
  return Number<bool>(field, set);
}

Setter Betas() {
  return [](const YAML::Node& node, v1::JobSpec* spec) -> absl::Status {
    if (!node.IsSequence() || node.size() != 2) {
      return TypeError("train.betas", node, "a list of two numbers");
    }
    absl::StatusOr<double> beta1 = Scalar<double>("train.betas[0]", node[0], "a number");
    if (!beta1.ok()) return beta1.status();
    absl::StatusOr<double> beta2 = Scalar<double>("train.betas[1]", node[1], "a number");
    if (!beta2.ok()) return beta2.status();
    spec->mutable_train()->set_beta1(*beta1);
    spec->mutable_train()->set_beta2(*beta2);
    return absl::OkStatus();
  };
}

// Every key a spec may hold, by its dotted path.
const std::map<std::string, Setter>& FieldSetters() {
  using S = v1::JobSpec;
  static const auto* setters = new std::map<std::string, Setter>{
      {"name", Text("name", [](S* s, std::string v) { s->set_name(v); })},
      {"max_restarts", Number<int>("max_restarts", [](S* s, int v) { s->set_max_restarts(v); })},
      {"priority", Number<int>("priority", [](S* s, int v) { s->set_priority(v); })},
      {"model.vocab",
       Number<int64_t>("model.vocab", [](S* s, int64_t v) { s->mutable_model()->set_vocab(v); })},
      {"model.dim",
       Number<int64_t>("model.dim", [](S* s, int64_t v) { s->mutable_model()->set_dim(v); })},
      {"model.layers",
       Number<int64_t>("model.layers", [](S* s, int64_t v) { s->mutable_model()->set_layers(v); })},
      {"model.heads",
       Number<int64_t>("model.heads", [](S* s, int64_t v) { s->mutable_model()->set_heads(v); })},
      {"model.ffn_mult",
       Number<int64_t>("model.ffn_mult",
                       [](S* s, int64_t v) { s->mutable_model()->set_ffn_mult(v); })},
      {"model.causal",
       Flag("model.causal", [](S* s, bool v) { s->mutable_model()->set_causal(v); })},
      {"model.final_norm",
       Flag("model.final_norm", [](S* s, bool v) { s->mutable_model()->set_final_norm(v); })},
      {"model.norm_eps",
       Number<double>("model.norm_eps",
                      [](S* s, double v) { s->mutable_model()->set_norm_eps(v); })},
      {"data.source",
       Text("data.source", [](S* s, std::string v) { s->mutable_data()->set_source(v); })},
      {"data.path", Text("data.path", [](S* s, std::string v) { s->mutable_data()->set_path(v); })},
      {"data.seq_len",
       Number<int64_t>("data.seq_len", [](S* s, int64_t v) { s->mutable_data()->set_seq_len(v); })},
      {"data.token_bytes",
       Number<int>("data.token_bytes", [](S* s, int v) { s->mutable_data()->set_token_bytes(v); })},
      {"train.batch_size",
       Number<int64_t>("train.batch_size",
                       [](S* s, int64_t v) { s->mutable_train()->set_batch_size(v); })},
      {"train.steps",
       Number<int64_t>("train.steps", [](S* s, int64_t v) { s->mutable_train()->set_steps(v); })},
      {"train.lr",
       Number<double>("train.lr", [](S* s, double v) { s->mutable_train()->set_lr(v); })},
      {"train.weight_decay",
       Number<double>("train.weight_decay",
                      [](S* s, double v) { s->mutable_train()->set_weight_decay(v); })},
      {"train.betas", Betas()},
      {"train.eps",
       Number<double>("train.eps", [](S* s, double v) { s->mutable_train()->set_eps(v); })},
      {"train.seed",
       Number<uint64_t>("train.seed", [](S* s, uint64_t v) { s->mutable_train()->set_seed(v); })},
      {"train.grad_clip",
       Number<double>("train.grad_clip",
                      [](S* s, double v) { s->mutable_train()->set_grad_clip(v); })},
      {"train.lr_schedule",
       Text("train.lr_schedule",
            [](S* s, std::string v) { s->mutable_train()->set_lr_schedule(v); })},
      {"train.warmup_steps",
       Number<int64_t>("train.warmup_steps",
                       [](S* s, int64_t v) { s->mutable_train()->set_warmup_steps(v); })},
      {"train.min_lr_ratio",
       Number<double>("train.min_lr_ratio",
                      [](S* s, double v) { s->mutable_train()->set_min_lr_ratio(v); })},
      {"parallel.world_size",
       Number<int>("parallel.world_size",
                   [](S* s, int v) { s->mutable_parallel()->set_world_size(v); })},
      {"parallel.device",
       Text("parallel.device", [](S* s, std::string v) { s->mutable_parallel()->set_device(v); })},
      {"parallel.param_dtype",
       Text("parallel.param_dtype",
            [](S* s, std::string v) { s->mutable_parallel()->set_param_dtype(v); })},
      {"parallel.reduce_dtype",
       Text("parallel.reduce_dtype",
            [](S* s, std::string v) { s->mutable_parallel()->set_reduce_dtype(v); })},
      {"parallel.reshard_after_forward",
       Flag("parallel.reshard_after_forward",
            [](S* s, bool v) { s->mutable_parallel()->set_reshard_after_forward(v); })},
      {"parallel.activation_recompute",
       Text("parallel.activation_recompute",
            [](S* s, std::string v) { s->mutable_parallel()->set_activation_recompute(v); })},
      {"checkpoint.every_steps",
       Number<int64_t>("checkpoint.every_steps",
                       [](S* s, int64_t v) { s->mutable_checkpoint()->set_every_steps(v); })},
      {"checkpoint.keep",
       Number<int>("checkpoint.keep", [](S* s, int v) { s->mutable_checkpoint()->set_keep(v); })},
      {"checkpoint.init_from",
       Text("checkpoint.init_from",
            [](S* s, std::string v) { s->mutable_checkpoint()->set_init_from(v); })},
      {"profile.start_step",
       Number<int64_t>("profile.start_step",
                       [](S* s, int64_t v) { s->mutable_profile()->set_start_step(v); })},
      {"profile.steps",
       Number<int64_t>("profile.steps",
                       [](S* s, int64_t v) { s->mutable_profile()->set_steps(v); })},
      {"profile.counters",
       Flag("profile.counters", [](S* s, bool v) { s->mutable_profile()->set_counters(v); })},
  };
  return *setters;
}

const std::set<std::string>& Sections() {
  static const auto* sections =
      new std::set<std::string>{"model", "data", "train", "parallel", "checkpoint", "profile"};
  return *sections;
}

absl::Status ApplyNode(const std::string& path, const YAML::Node& node, v1::JobSpec* spec) {
  if (Sections().count(path)) {
    if (node.IsNull()) return absl::OkStatus();
    if (!node.IsMap()) return TypeError(path, node, "a mapping");
    for (const auto& entry : node) {
      absl::Status status =
          ApplyNode(path + "." + entry.first.as<std::string>(), entry.second, spec);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }
  auto setter = FieldSetters().find(path);
  if (setter == FieldSetters().end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unknown field"));
  }
  return setter->second(node, spec);
}

bool Finite(double value) { return std::isfinite(value); }

}  // namespace

v1::JobSpec DefaultJobSpec() {
  v1::JobSpec spec;
  v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab(32000);
  model->set_dim(2048);
  model->set_layers(12);
  model->set_heads(16);
  model->set_ffn_mult(4);
  v1::DataSpec* data = spec.mutable_data();
  data->set_source("synthetic");
  data->set_seq_len(1024);
  data->set_token_bytes(2);
  v1::TrainSpec* train = spec.mutable_train();
  train->set_batch_size(8);
  train->set_steps(1000);
  train->set_lr(3.0e-4);
  train->set_weight_decay(0.01);
  train->set_beta1(0.9);
  train->set_beta2(0.999);
  train->set_eps(1e-8);
  train->set_lr_schedule("constant");
  v1::ParallelSpec* parallel = spec.mutable_parallel();
  parallel->set_world_size(4);
  parallel->set_device("cuda");
  parallel->set_param_dtype("bf16");
  parallel->set_reduce_dtype("fp32");
  parallel->set_reshard_after_forward(true);
  parallel->set_activation_recompute("none");
  v1::CheckpointSpec* checkpoint = spec.mutable_checkpoint();
  checkpoint->set_every_steps(200);
  checkpoint->set_keep(3);
  v1::ProfileSpec* profile = spec.mutable_profile();
  profile->set_start_step(20);
  profile->set_steps(3);
  profile->set_counters(true);
  spec.set_max_restarts(3);
  return spec;
}

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("spec is not valid YAML: ", error.what()));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError("spec must be a YAML mapping of fields (name, model, ...)");
  }
  v1::JobSpec spec = DefaultJobSpec();
  try {
    for (const auto& entry : root) {
      absl::Status status = ApplyNode(entry.first.as<std::string>(), entry.second, &spec);
      if (!status.ok()) return status;
    }
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", error.what()));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read spec file ", path));
  std::stringstream text;
  text << file.rdbuf();
  return ParseJobSpecYaml(text.str());
}

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << spec.name();
  const v1::ModelSpec& m = spec.model();
  out << YAML::Key << "model" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "vocab" << YAML::Value << m.vocab() << YAML::Key << "dim" << YAML::Value
      << m.dim() << YAML::Key << "layers" << YAML::Value << m.layers() << YAML::Key << "heads"
      << YAML::Value << m.heads() << YAML::Key << "ffn_mult" << YAML::Value << m.ffn_mult()
      << YAML::Key << "causal" << YAML::Value << m.causal() << YAML::Key << "final_norm"
      << YAML::Value << m.final_norm() << YAML::EndMap;
  const v1::DataSpec& d = spec.data();
  out << YAML::Key << "data" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "source" << YAML::Value << d.source();
  if (!d.path().empty()) out << YAML::Key << "path" << YAML::Value << d.path();
  out << YAML::Key << "seq_len" << YAML::Value << d.seq_len() << YAML::EndMap;
  const v1::TrainSpec& t = spec.train();
  out << YAML::Key << "train" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "batch_size" << YAML::Value << t.batch_size() << YAML::Key << "steps"
      << YAML::Value << t.steps() << YAML::Key << "lr" << YAML::Value << t.lr() << YAML::Key
      << "weight_decay" << YAML::Value << t.weight_decay() << YAML::Key << "betas" << YAML::Value
      << YAML::Flow << YAML::BeginSeq << t.beta1() << t.beta2() << YAML::EndSeq << YAML::Key
      << "seed" << YAML::Value << t.seed() << YAML::Key << "lr_schedule" << YAML::Value
      << t.lr_schedule() << YAML::EndMap;
  const v1::ParallelSpec& p = spec.parallel();
  out << YAML::Key << "parallel" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "world_size" << YAML::Value << p.world_size() << YAML::Key << "device"
      << YAML::Value << p.device() << YAML::Key << "param_dtype" << YAML::Value << p.param_dtype()
      << YAML::Key << "reduce_dtype" << YAML::Value << p.reduce_dtype() << YAML::Key
      << "activation_recompute" << YAML::Value
      << (p.activation_recompute().empty() ? "none" : p.activation_recompute()) << YAML::EndMap;
  const v1::CheckpointSpec& c = spec.checkpoint();
  out << YAML::Key << "checkpoint" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "every_steps" << YAML::Value << c.every_steps() << YAML::Key << "keep"
      << YAML::Value << c.keep();
  if (!c.init_from().empty()) out << YAML::Key << "init_from" << YAML::Value << c.init_from();
  out << YAML::EndMap;
  out << YAML::Key << "max_restarts" << YAML::Value << spec.max_restarts() << YAML::Key
      << "priority" << YAML::Value << spec.priority() << YAML::EndMap;
  return out.c_str();
}

std::vector<FieldError> ValidateJobSpec(const v1::JobSpec& spec) {
  std::vector<FieldError> errors;
  auto fail = [&errors](std::string field, std::string message) {
    errors.push_back({std::move(field), std::move(message)});
  };
  auto in_range = [&fail](const std::string& field, int64_t value, int64_t low, int64_t high) {
    if (value < low || value > high) {
      fail(field, absl::StrCat("must be between ", low, " and ", high, " (got ", value, ")"));
      return false;
    }
    return true;
  };

  static const std::regex kNamePattern("[A-Za-z0-9][A-Za-z0-9._-]*");
  if (spec.name().empty()) {
    fail("name", "is required");
  } else if (spec.name().size() > kMaxNameLength) {
    fail("name", absl::StrCat("must be at most ", kMaxNameLength, " characters"));
  } else if (!std::regex_match(spec.name(), kNamePattern)) {
    fail("name",
         "may hold only letters, digits, '.', '_' and '-', and must start with a "
         "letter or digit (got '" +
             spec.name() + "')");
  }

  const v1::ModelSpec& model = spec.model();
  in_range("model.vocab", model.vocab(), 2, kMaxVocab);
  bool dim_ok = in_range("model.dim", model.dim(), 1, kMaxDim);
  in_range("model.layers", model.layers(), 1, kMaxLayers);
  bool heads_ok = in_range("model.heads", model.heads(), 1, kMaxDim);
  in_range("model.ffn_mult", model.ffn_mult(), 1, 64);
  if (dim_ok && heads_ok) {
    if (model.dim() % model.heads() != 0) {
      fail("model.dim", absl::StrCat("must be divisible by model.heads (got ", model.dim(), " and ",
                                     model.heads(), ")"));
    } else if (model.dim() / model.heads() > kMaxHeadDim) {
      fail("model.heads", absl::StrCat("head_dim = dim / heads must be at most ", kMaxHeadDim,
                                       " (got ", model.dim() / model.heads(), ")"));
    } else if (spec.parallel().device() == "cuda" && model.dim() / model.heads() > 128) {
      fail("model.heads", absl::StrCat("the cuda attention kernels support head_dim up to 128 "
                                       "(got ",
                                       model.dim() / model.heads(), ")"));
    }
  }
  if (!Finite(model.norm_eps()) || model.norm_eps() < 0 || model.norm_eps() > 1) {
    fail("model.norm_eps", "must be between 0 (the dtype's machine epsilon) and 1");
  }

  const v1::DataSpec& data = spec.data();
  static const std::set<std::string> kSources = {"synthetic", "tokens", "text"};
  if (!kSources.count(data.source())) {
    fail("data.source", "must be one of synthetic, tokens, text (got '" + data.source() + "')");
  } else if (data.source() != "synthetic" && data.path().empty()) {
    fail("data.path", "is required when data.source is " + data.source());
  }
  if (data.path().size() > kMaxPathLength) {
    fail("data.path", absl::StrCat("must be at most ", kMaxPathLength, " characters"));
  }
  in_range("data.seq_len", data.seq_len(), 1, kMaxSeqLen);
  if (data.token_bytes() != 2 && data.token_bytes() != 4) {
    fail("data.token_bytes",
         absl::StrCat("must be 2 (uint16) or 4 (uint32) (got ", data.token_bytes(), ")"));
  } else if (data.source() == "tokens" && data.token_bytes() == 2 && model.vocab() > 65536) {
    fail("data.token_bytes", "uint16 tokens cannot address a vocab above 65536; use 4");
  }
  if (data.source() == "text" && model.vocab() < 256) {
    fail("model.vocab", absl::StrCat("the byte-level text tokenizer needs vocab >= 256 (got ",
                                     model.vocab(), ")"));
  }

  const v1::TrainSpec& train = spec.train();
  in_range("train.batch_size", train.batch_size(), 1, kMaxBatch);
  in_range("train.steps", train.steps(), 1, kMaxSteps);
  if (!Finite(train.lr()) || train.lr() <= 0 || train.lr() > 10) {
    fail("train.lr", absl::StrCat("must be a number in (0, 10] (got ", train.lr(), ")"));
  }
  if (!Finite(train.weight_decay()) || train.weight_decay() < 0) {
    fail("train.weight_decay", "must be a non-negative number");
  }
  for (auto [field, beta] : {std::pair<const char*, double>{"train.betas[0]", train.beta1()},
                             {"train.betas[1]", train.beta2()}}) {
    if (!Finite(beta) || beta < 0 || beta >= 1) {
      fail(field, absl::StrCat("must be in [0, 1) (got ", beta, ")"));
    }
  }
  if (!Finite(train.eps()) || train.eps() <= 0) fail("train.eps", "must be a positive number");
  if (!Finite(train.grad_clip()) || train.grad_clip() < 0) {
    fail("train.grad_clip", "must be 0 (off) or a positive number");
  }
  if (train.lr_schedule() != "constant" && train.lr_schedule() != "cosine") {
    fail("train.lr_schedule", "must be constant or cosine (got '" + train.lr_schedule() + "')");
  }
  if (train.warmup_steps() < 0 || train.warmup_steps() > train.steps()) {
    fail("train.warmup_steps", "must be between 0 and train.steps");
  }
  if (!Finite(train.min_lr_ratio()) || train.min_lr_ratio() < 0 || train.min_lr_ratio() > 1) {
    fail("train.min_lr_ratio", "must be in [0, 1]");
  }

  const v1::ParallelSpec& parallel = spec.parallel();
  in_range("parallel.world_size", parallel.world_size(), 1, kMaxWorldSize);
  if (parallel.device() != "cpu" && parallel.device() != "cuda") {
    fail("parallel.device", "must be cpu or cuda (got '" + parallel.device() + "')");
  }
  if (parallel.param_dtype() != "bf16" && parallel.param_dtype() != "fp32") {
    fail("parallel.param_dtype", "must be bf16 or fp32 (got '" + parallel.param_dtype() + "')");
  }
  if (parallel.reduce_dtype() != "fp32") {
    fail("parallel.reduce_dtype", "must be fp32, the only reduction dtype supported (got '" +
                                      parallel.reduce_dtype() + "')");
  }
  const std::string& recompute = parallel.activation_recompute();
  if (!recompute.empty() && recompute != "none" && recompute != "ffn" && recompute != "block") {
    fail("parallel.activation_recompute", "must be none, ffn or block (got '" + recompute + "')");
  }

  const v1::CheckpointSpec& checkpoint = spec.checkpoint();
  in_range("checkpoint.every_steps", checkpoint.every_steps(), 0, kMaxSteps);
  in_range("checkpoint.keep", checkpoint.keep(), 1, 1000);
  if (checkpoint.init_from().size() > kMaxPathLength) {
    fail("checkpoint.init_from", absl::StrCat("must be at most ", kMaxPathLength, " characters"));
  }
  in_range("profile.start_step", spec.profile().start_step(), 0, kMaxSteps);
  in_range("profile.steps", spec.profile().steps(), 0, 1000);
  in_range("max_restarts", spec.max_restarts(), 0, 100);
  in_range("priority", spec.priority(), -1000, 1000);
  return errors;
}

std::string FormatFieldErrors(const std::vector<FieldError>& errors) {
  std::vector<std::string> parts;
  for (const FieldError& error : errors) parts.push_back(error.field + ": " + error.message);
  return absl::StrJoin(parts, "; ");
}

int64_t ParameterCount(const v1::ModelSpec& model) {
  const int64_t d = model.dim();
  const int64_t f = model.ffn_mult() * d;
  const int64_t per_block = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * f;
  return 2 * model.vocab() * d + model.layers() * per_block + (model.final_norm() ? d : 0);
}

double FlopsPerToken(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  return 6.0 * static_cast<double>(ParameterCount(model)) +
         12.0 * static_cast<double>(model.layers()) * static_cast<double>(spec.data().seq_len()) *
             static_cast<double>(model.dim());
}

double EstimateRankDeviceBytes(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  const double world = std::max(1, spec.parallel().world_size());
  const double params = static_cast<double>(ParameterCount(model));
  const double d = model.dim(), f = model.ffn_mult() * d, v = model.vocab();
  const double param_bytes = spec.parallel().param_dtype() == "bf16" ? 2 : 4;
  const double activation_bytes = spec.parallel().device() == "cuda" ? 2 : 4;
  // Unsharded params and grads of the largest unit, twice for prefetch.
  const double block = 4 * d * d + 2 * d * f;
  const double largest_unit = std::max(block, 2 * v * d);
  const double unsharded = 2 * largest_unit * (param_bytes + 4);
  // fp32 master and AdamW m and v, sharded. Without clipping the optimizer runs in backward and
  // only the gradient shards of the units in flight (two) exist; with it, the whole one does.
  const double gradient_shards =
      spec.train().grad_clip() > 0 ? 4.0 * params / world : 2 * 4.0 * largest_unit / world;
  const double sharded_state = 12.0 * params / world + gradient_shards;
  // Activations per token per block: residuals, norms, qkv, attention out, ffn hidden ×2 (a
  // generous count of what a block keeps and its backward's workspace). Recompute keeps less:
  // ffn drops ffn.0's output; block keeps only each block's input, and one block's worth once.
  const double tokens = static_cast<double>(spec.train().batch_size()) * spec.data().seq_len();
  const double per_token_block = (4 * d + 3 * d + d + 2 * f) * activation_bytes;
  const std::string& recompute = spec.parallel().activation_recompute();
  double kept_per_token = model.layers() * per_token_block;
  if (recompute == "ffn") kept_per_token -= model.layers() * f * activation_bytes;
  if (recompute == "block")
    kept_per_token = model.layers() * d * activation_bytes + per_token_block;
  const double activations = tokens * (kept_per_token + 2 * d * 4);
  return sharded_state + unsharded + activations;
}

}  // namespace fsdpd
