// The model's weights as whole tensors with PyTorch's names: initial weights (PyTorch's
// initialisation, or a safetensors file from `checkpoint.init_from`) and the consolidated
// export at the end of a run.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "formats/safetensors.h"
#include "worker/comm/communicator.h"
#include "worker/fsdp/fsdp_state.h"
#include "worker/model/model_config.h"

namespace fsdpd {

// Where InitializeWeightsFromSeed's time went, in wall-clock seconds: drawing the values (on
// threads) and loading them into the rank's shards (FsdpState::LoadMasterFromHost, the copies to
// the device included). The trainer logs both, beside the engine's build time: a 6.3B-parameter
// model took 49 s from start to its first step on an H100, divided among the three in a way
// no log said then (bench/RESULTS.md, "Capacity at width 4096").
struct WeightInitTimes {
  double draw_seconds = 0.0;
  double load_seconds = 0.0;
};

// PyTorch's default initialisation of every unit, seeded with `seed`; independent of the
// world size. Not collective.
absl::StatusOr<WeightInitTimes> InitializeWeightsFromSeed(const ModelConfig& config, uint64_t seed,
                                                          FsdpState& state);

// Loads every parameter from a safetensors file with PyTorch's names (the path is already
// confined). Names the model does not have, parameters the file lacks, and wrong shapes are
// INVALID_ARGUMENT listing them. Not collective.
absl::Status InitializeWeightsFromFile(const std::string& path, FsdpState& state);

// Loads every parameter from whole tensors with PyTorch's names into this rank's master
// shards, with the checks of InitializeWeightsFromFile; errors start with "<field>: <source>"
// (e.g. "checkpoint.init_from: /data/w.safetensors"). Not collective.
absl::Status InitializeWeightsFromTensors(const std::vector<NamedTensor>& tensors,
                                          const std::string& field, const std::string& source,
                                          FsdpState& state);

// The whole tensors with PyTorch's names of the units' unpadded flat fp32 values
// (unit_values[i] holds units[i].numel values), in unit and then state_dict order.
std::vector<NamedTensor> TensorsOfUnits(const std::vector<UnitLayout>& units,
                                        const std::vector<std::vector<float>>& unit_values);

// Writes the exported model: `tensors` as one safetensors file at `path` (atomically) with the
// step and the model config in its __metadata__ (formats/model_metadata.h). The one writer of
// an exported model, at the end of a run and from a checkpoint (worker/checkpoint/consolidate.h).
absl::Status WriteExportedModel(const std::string& path, int64_t step, const ModelConfig& config,
                                const std::vector<NamedTensor>& tensors);

// Collective: gathers every unit's fp32 master; rank 0 then writes one safetensors file of
// the whole model with PyTorch's names to `path` (atomically), with the model config in its
// __metadata__ (formats/model_metadata.h). Returns `path` on rank 0 and an empty string
// elsewhere.
absl::StatusOr<std::string> ExportConsolidatedModel(const std::string& path, int64_t step,
                                                    const ModelConfig& config, FsdpState& state,
                                                    Communicator& communicator);

}  // namespace fsdpd
