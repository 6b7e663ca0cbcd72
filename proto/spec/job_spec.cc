// Job specs as YAML: parsing with an error per bad key, defaults, and printing back.
#include "proto/spec/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace fsdpd {
namespace {

// A field setter parses one YAML scalar into the spec, or explains why it cannot.
using Setter = std::function<absl::Status(const YAML::Node&, v1::JobSpec*)>;

absl::Status TypeError(const std::string& field, const YAML::Node& node, const char* expected) {
  std::string got = node.IsScalar()     ? "'" + node.Scalar() + "'"
                    : node.IsSequence() ? "a list"
                    : node.IsMap()      ? "a mapping"
                                        : "nothing";
  return absl::InvalidArgumentError(absl::StrCat(field, ": expected ", expected, ", got ", got));
}

// An integer written in the spec that does not fit the field's type: say so, with the range,
// rather than "expected an integer".
template <typename T>
absl::Status RangeError(const std::string& field, const YAML::Node& node) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    static const std::regex kInteger("[-+]?[0-9]+");
    if (std::regex_match(node.Scalar(), kInteger)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", node.Scalar(), " is out of range; it must be between ",
                       std::numeric_limits<T>::min(), " and ", std::numeric_limits<T>::max()));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<T> Scalar(const std::string& field, const YAML::Node& node, const char* expected) {
  if (!node.IsScalar()) return TypeError(field, node, expected);
  T value;
  if (!YAML::convert<T>::decode(node, value)) {
    FSDPD_RETURN_IF_ERROR(RangeError<T>(field, node));
    return TypeError(field, node, expected);
  }
  return value;
}

// yaml-cpp keeps every entry of a mapping with a repeated key, and applying them in turn would
// silently let the last one win: a repeated key is an error that names it.
absl::Status CheckUniqueKeys(const std::string& prefix, const YAML::Node& map) {
  std::set<std::string> seen;
  for (const auto& entry : map) {
    const std::string key = entry.first.as<std::string>();
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix.empty() ? key : prefix + "." + key,
                       ": appears more than once in the spec; keep one"));
    }
  }
  return absl::OkStatus();
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
      {"model.arch",
       Text("model.arch", [](S* s, std::string v) { s->mutable_model()->set_arch(v); })},
      {"model.kv_heads",
       Number<int64_t>("model.kv_heads",
                       [](S* s, int64_t v) { s->mutable_model()->set_kv_heads(v); })},
      {"model.rope_theta",
       Number<double>("model.rope_theta",
                      [](S* s, double v) { s->mutable_model()->set_rope_theta(v); })},
      {"model.ffn_dim",
       Number<int64_t>("model.ffn_dim",
                       [](S* s, int64_t v) { s->mutable_model()->set_ffn_dim(v); })},
      {"model.tie_embeddings",
       Flag("model.tie_embeddings",
            [](S* s, bool v) { s->mutable_model()->set_tie_embeddings(v); })},
      {"data.source",
       Text("data.source", [](S* s, std::string v) { s->mutable_data()->set_source(v); })},
      {"data.path", Text("data.path", [](S* s, std::string v) { s->mutable_data()->set_path(v); })},
      {"data.seq_len",
       Number<int64_t>("data.seq_len", [](S* s, int64_t v) { s->mutable_data()->set_seq_len(v); })},
      {"data.token_bytes",
       Number<int>("data.token_bytes", [](S* s, int v) { s->mutable_data()->set_token_bytes(v); })},
      {"data.eval_path",
       Text("data.eval_path", [](S* s, std::string v) { s->mutable_data()->set_eval_path(v); })},
      {"data.eval_every",
       Number<int64_t>("data.eval_every",
                       [](S* s, int64_t v) { s->mutable_data()->set_eval_every(v); })},
      {"data.eval_batches",
       Number<int64_t>("data.eval_batches",
                       [](S* s, int64_t v) { s->mutable_data()->set_eval_batches(v); })},
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
      {"train.beta1",
       Number<double>("train.beta1", [](S* s, double v) { s->mutable_train()->set_beta1(v); })},
      {"train.beta2",
       Number<double>("train.beta2", [](S* s, double v) { s->mutable_train()->set_beta2(v); })},
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
      {"train.grad_accum_steps",
       Number<int64_t>("train.grad_accum_steps",
                       [](S* s, int64_t v) { s->mutable_train()->set_grad_accum_steps(v); })},
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
      {"parallel.matmul_dtype",
       Text("parallel.matmul_dtype",
            [](S* s, std::string v) { s->mutable_parallel()->set_matmul_dtype(v); })},
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
    FSDPD_RETURN_IF_ERROR(CheckUniqueKeys(path, node));
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

// Copies each scalar that defaults has and message lacks, recursing into sub-messages.
void FillUnset(const google::protobuf::Message& defaults, google::protobuf::Message* message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* from = defaults.GetReflection();
  const google::protobuf::Reflection* to = message->GetReflection();
  const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->is_repeated()) continue;
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (from->HasField(defaults, field)) {
        FillUnset(from->GetMessage(defaults, field), to->MutableMessage(message, field));
      }
      continue;
    }
    if (!field->has_presence() || to->HasField(*message, field) ||
        !from->HasField(defaults, field)) {
      continue;
    }
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        to->SetInt32(message, field, from->GetInt32(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        to->SetInt64(message, field, from->GetInt64(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        to->SetUInt32(message, field, from->GetUInt32(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        to->SetUInt64(message, field, from->GetUInt64(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        to->SetDouble(message, field, from->GetDouble(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        to->SetFloat(message, field, from->GetFloat(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        to->SetBool(message, field, from->GetBool(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        to->SetEnumValue(message, field, from->GetEnumValue(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        to->SetString(message, field, from->GetString(defaults, field));
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        break;
    }
  }
}

}  // namespace

void ApplyJobSpecDefaults(v1::JobSpec* spec) { FillUnset(DefaultJobSpec(), spec); }

v1::JobSpec DefaultJobSpec() {
  v1::JobSpec spec;
  v1::ModelSpec* model = spec.mutable_model();
  model->set_vocab(32000);
  model->set_dim(2048);
  model->set_layers(12);
  model->set_heads(16);
  model->set_ffn_mult(4);
  model->set_causal(false);
  model->set_final_norm(false);
  model->set_norm_eps(0);
  model->set_arch("minillm");
  model->set_kv_heads(0);
  model->set_rope_theta(10000);
  model->set_ffn_dim(0);
  model->set_tie_embeddings(false);
  v1::DataSpec* data = spec.mutable_data();
  data->set_source("synthetic");
  data->set_seq_len(1024);
  data->set_path("");
  data->set_token_bytes(2);
  data->set_eval_path("");
  data->set_eval_every(0);
  data->set_eval_batches(8);
  v1::TrainSpec* train = spec.mutable_train();
  train->set_batch_size(8);
  train->set_steps(1000);
  train->set_lr(3.0e-4);
  train->set_weight_decay(0.01);
  train->set_beta1(0.9);
  train->set_beta2(0.999);
  train->set_eps(1e-8);
  train->set_seed(0);
  train->set_grad_clip(0);
  train->set_lr_schedule("constant");
  train->set_warmup_steps(0);
  train->set_min_lr_ratio(0);
  train->set_grad_accum_steps(1);
  v1::ParallelSpec* parallel = spec.mutable_parallel();
  parallel->set_world_size(4);
  parallel->set_device("cuda");
  parallel->set_param_dtype("bf16");
  parallel->set_reduce_dtype("fp32");
  parallel->set_reshard_after_forward(true);
  parallel->set_activation_recompute("none");
  parallel->set_matmul_dtype("bf16");
  v1::CheckpointSpec* checkpoint = spec.mutable_checkpoint();
  checkpoint->set_every_steps(200);
  checkpoint->set_keep(3);
  checkpoint->set_init_from("");
  v1::ProfileSpec* profile = spec.mutable_profile();
  profile->set_start_step(20);
  profile->set_steps(3);
  profile->set_counters(false);  // opt-in: the counter replay roughly doubles device memory
  spec.set_max_restarts(3);
  spec.set_priority(0);
  return spec;
}

absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(const std::string& yaml_text, SpecDefaults defaults) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("spec is not valid YAML: ", error.what()));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError("spec must be a YAML mapping of fields (name, model, ...)");
  }
  v1::JobSpec spec = defaults == SpecDefaults::kApply ? DefaultJobSpec() : v1::JobSpec();
  try {
    FSDPD_RETURN_IF_ERROR(CheckUniqueKeys("", root));
    for (const auto& entry : root) {
      absl::Status status = ApplyNode(entry.first.as<std::string>(), entry.second, &spec);
      if (!status.ok()) return status;
    }
  } catch (const YAML::Exception& error) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", error.what()));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path, SpecDefaults defaults) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read spec file ", path));
  std::stringstream text;
  text << file.rdbuf();
  return ParseJobSpecYaml(text.str(), defaults);
}

std::string JobSpecToYaml(const v1::JobSpec& spec) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << spec.name();
  const v1::ModelSpec& m = spec.model();
  out << YAML::Key << "model" << YAML::Value << YAML::Flow << YAML::BeginMap;
  if (m.arch() == "llama") out << YAML::Key << "arch" << YAML::Value << m.arch();
  out << YAML::Key << "vocab" << YAML::Value << m.vocab() << YAML::Key << "dim" << YAML::Value
      << m.dim() << YAML::Key << "layers" << YAML::Value << m.layers() << YAML::Key << "heads"
      << YAML::Value << m.heads() << YAML::Key << "ffn_mult" << YAML::Value << m.ffn_mult()
      << YAML::Key << "causal" << YAML::Value << m.causal() << YAML::Key << "final_norm"
      << YAML::Value << m.final_norm();
  if (m.arch() == "llama") {
    out << YAML::Key << "kv_heads" << YAML::Value << m.kv_heads() << YAML::Key << "rope_theta"
        << YAML::Value << m.rope_theta() << YAML::Key << "ffn_dim" << YAML::Value << m.ffn_dim()
        << YAML::Key << "tie_embeddings" << YAML::Value << m.tie_embeddings() << YAML::Key
        << "norm_eps" << YAML::Value << m.norm_eps();
  }
  out << YAML::EndMap;
  const v1::DataSpec& d = spec.data();
  out << YAML::Key << "data" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "source" << YAML::Value << d.source();
  if (!d.path().empty()) out << YAML::Key << "path" << YAML::Value << d.path();
  out << YAML::Key << "seq_len" << YAML::Value << d.seq_len();
  if (!d.eval_path().empty()) out << YAML::Key << "eval_path" << YAML::Value << d.eval_path();
  out << YAML::Key << "eval_every" << YAML::Value << d.eval_every() << YAML::Key << "eval_batches"
      << YAML::Value << d.eval_batches() << YAML::EndMap;
  const v1::TrainSpec& t = spec.train();
  out << YAML::Key << "train" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "batch_size" << YAML::Value << t.batch_size() << YAML::Key << "steps"
      << YAML::Value << t.steps() << YAML::Key << "lr" << YAML::Value << t.lr() << YAML::Key
      << "weight_decay" << YAML::Value << t.weight_decay() << YAML::Key << "beta1" << YAML::Value
      << t.beta1() << YAML::Key << "beta2" << YAML::Value << t.beta2() << YAML::Key << "seed"
      << YAML::Value << t.seed() << YAML::Key << "lr_schedule" << YAML::Value << t.lr_schedule()
      << YAML::Key << "grad_accum_steps" << YAML::Value << t.grad_accum_steps() << YAML::EndMap;
  const v1::ParallelSpec& p = spec.parallel();
  out << YAML::Key << "parallel" << YAML::Value << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "world_size" << YAML::Value << p.world_size() << YAML::Key << "device"
      << YAML::Value << p.device() << YAML::Key << "param_dtype" << YAML::Value << p.param_dtype()
      << YAML::Key << "reduce_dtype" << YAML::Value << p.reduce_dtype() << YAML::Key
      << "activation_recompute" << YAML::Value
      << (p.activation_recompute().empty() ? "none" : p.activation_recompute()) << YAML::Key
      << "matmul_dtype" << YAML::Value << (p.matmul_dtype().empty() ? "bf16" : p.matmul_dtype())
      << YAML::EndMap;
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

}  // namespace fsdpd
