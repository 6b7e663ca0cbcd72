#include "worker/trainer_weights.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/run_on_threads.h"
#include "base/status_macros.h"
#include "formats/model_metadata.h"
#include "formats/safetensors.h"

namespace fsdpd {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// At most a few names, so an error about a wrong file stays readable.
std::string NameList(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kShown));
  std::string text = absl::StrJoin(shown, ", ");
  if (names.size() > kShown) absl::StrAppend(&text, " and ", names.size() - kShown, " more");
  return text;
}

}  // namespace

absl::StatusOr<WeightInitTimes> InitializeWeightsFromSeed(const ModelConfig& config, uint64_t seed,
                                                          FsdpState& state) {
  // Each unit draws from its own generator (InitializeUnit), so units fill on threads of their
  // own and the values do not depend on how many (engine_fsdp_test), which matters for models of
  // billions of parameters (bench/gpu_capacity.sh). Units are filled in waves of at most kThreads,
  // holding at most kWaveValues floats (or one unit, if larger) on the host per rank, and are
  // loaded in unit order on this thread.
  constexpr int kThreads = 8;
  constexpr int64_t kWaveValues = int64_t{1} << 30;  // 4 GiB of fp32
  const int threads =
      std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, kThreads);
  WeightInitTimes times;
  auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  int next = 0;
  while (next < state.num_units()) {
    const auto drawing = std::chrono::steady_clock::now();
    int end = next;
    int64_t wave_values = 0;
    while (end < state.num_units() && end - next < threads &&
           (end == next || wave_values + state.unit(end).numel <= kWaveValues)) {
      wave_values += state.unit(end).numel;
      ++end;
    }
    std::vector<std::vector<float>> values(static_cast<size_t>(end - next));
    RunOnThreads(end - next, [&](int index) {
      const int unit = next + index;
      std::vector<float>& unit_values = values[static_cast<size_t>(index)];
      unit_values.resize(static_cast<size_t>(state.unit(unit).numel));
      InitializeUnit(config, state.unit(unit), unit, seed, unit_values.data());
    });
    times.draw_seconds += seconds_since(drawing);
    const auto loading = std::chrono::steady_clock::now();
    for (int unit = next; unit < end; ++unit) {
      FSDPD_RETURN_IF_ERROR(
          state.LoadMasterFromHost(unit, values[static_cast<size_t>(unit - next)]));
    }
    times.load_seconds += seconds_since(loading);
    next = end;
  }
  return times;
}

absl::Status InitializeWeightsFromFile(const std::string& path, FsdpState& state) {
  absl::StatusOr<std::vector<NamedTensor>> tensors = ReadSafetensors(path);
  if (!tensors.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint.init_from: cannot read ", path, ": ", tensors.status().message()));
  }
  return InitializeWeightsFromTensors(*tensors, "checkpoint.init_from", path, state);
}

absl::Status InitializeWeightsFromTensors(const std::vector<NamedTensor>& tensors,
                                          const std::string& field, const std::string& source,
                                          FsdpState& state) {
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& tensor : tensors) by_name[tensor.name] = &tensor;

  std::vector<std::string> missing, wrong_shape;
  std::set<std::string> known;
  std::vector<std::vector<float>> unit_values(state.num_units());
  for (int unit = 0; unit < state.num_units(); ++unit) {
    unit_values[unit].assign(static_cast<size_t>(state.unit(unit).numel), 0.0f);
    for (const ParameterInfo& parameter : state.unit(unit).parameters) {
      known.insert(parameter.name);
      auto found = by_name.find(parameter.name);
      if (found == by_name.end()) {
        missing.push_back(parameter.name);
        continue;
      }
      const NamedTensor& tensor = *found->second;
      if (tensor.shape != parameter.shape ||
          static_cast<int64_t>(tensor.values.size()) != parameter.numel) {
        wrong_shape.push_back(absl::StrCat(parameter.name, " is ", ShapeText(tensor.shape),
                                           ", the model needs ", ShapeText(parameter.shape)));
        continue;
      }
      std::copy(tensor.values.begin(), tensor.values.end(),
                unit_values[unit].begin() + parameter.offset);
    }
  }
  std::vector<std::string> unknown;
  for (const auto& [name, tensor] : by_name) {
    if (known.count(name) == 0) unknown.push_back(name);
  }
  std::vector<std::string> problems;
  if (!unknown.empty()) {
    problems.push_back(
        absl::StrCat(unknown.size(), " tensor(s) the model does not have: ", NameList(unknown)));
  }
  if (!missing.empty()) {
    problems.push_back(
        absl::StrCat(missing.size(), " parameter(s) missing from it: ", NameList(missing)));
  }
  if (!wrong_shape.empty()) {
    problems.push_back(absl::StrCat("wrong shapes: ", NameList(wrong_shape)));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", source, " does not match the model: ", absl::StrJoin(problems, "; ")));
  }
  for (int unit = 0; unit < state.num_units(); ++unit) {
    FSDPD_RETURN_IF_ERROR(state.LoadMasterFromHost(unit, unit_values[unit]));
  }
  return absl::OkStatus();
}

std::vector<NamedTensor> TensorsOfUnits(const std::vector<UnitLayout>& units,
                                        const std::vector<std::vector<float>>& unit_values) {
  std::vector<NamedTensor> tensors;
  for (size_t unit = 0; unit < units.size(); ++unit) {
    const std::vector<float>& values = unit_values[unit];
    for (const ParameterInfo& parameter : units[unit].parameters) {
      NamedTensor tensor;
      tensor.name = parameter.name;
      tensor.shape = parameter.shape;
      tensor.values.assign(values.begin() + parameter.offset,
                           values.begin() + parameter.offset + parameter.numel);
      tensors.push_back(std::move(tensor));
    }
  }
  return tensors;
}

absl::Status WriteExportedModel(const std::string& path, int64_t step, const ModelConfig& config,
                                const std::vector<NamedTensor>& tensors) {
  // The model section of the spec travels with the weights, so that a reader without the
  // spec (fsdpd-edge, PyTorch) can rebuild the architecture; "format": "pt" is what
  // safetensors' PyTorch loader expects.
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", absl::StrCat(step)}};
  if (config.llama()) {
    AppendLlamaMetadata({.vocab = config.vocab,
                         .dim = config.dim,
                         .layers = config.layers,
                         .heads = config.heads,
                         .kv_heads = config.kv_heads,
                         .ffn_dim = config.ffn_hidden,
                         .rope_theta = config.rope_theta,
                         .tie_embeddings = config.tie_embeddings,
                         .norm_eps = config.norm_eps},
                        &metadata);
  } else {
    AppendModelMetadata({.vocab = config.vocab,
                         .dim = config.dim,
                         .layers = config.layers,
                         .heads = config.heads,
                         .ffn_mult = config.ffn_hidden / config.dim,
                         .causal = config.causal,
                         .final_norm = config.final_norm,
                         .norm_eps = config.norm_eps},
                        &metadata);
  }
  absl::Status written = WriteSafetensors(path, tensors, metadata);
  if (!written.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write the exported model to ", path, ": ", written.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ExportConsolidatedModel(const std::string& path, int64_t step,
                                                    const ModelConfig& config, FsdpState& state,
                                                    Communicator& communicator) {
  std::vector<UnitLayout> units;
  std::vector<std::vector<float>> unit_values(state.num_units());
  for (int unit = 0; unit < state.num_units(); ++unit) {
    FSDPD_RETURN_IF_ERROR(state.GatherMasterToHost(unit, &unit_values[unit]));
    units.push_back(state.unit(unit));
  }
  if (communicator.rank() != 0) return std::string();
  FSDPD_RETURN_IF_ERROR(WriteExportedModel(path, step, config, TensorsOfUnits(units, unit_values)));
  return path;
}

}  // namespace fsdpd
