// Exported models with random weights, for the edge runtime's tests and benchmarks: every
// tensor of formats/model_metadata.h's ExportedModelTensors, scaled as a trained model's would
// be (matrices uniform within ±1/√fan_in, the embedding within ±1), so activations stay O(1).
// Speed does not depend on the values, and tests compare backends on the same file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "formats/model_metadata.h"
#include "formats/safetensors.h"

namespace fsdpd::edge {

// `count` values uniform in [-scale, scale), the same for the same seed on every machine
// (a xorshift generator: fast enough for models of billions of parameters).
std::vector<float> RandomValues(int64_t count, float scale, uint64_t seed);

// Norm weights are 1 and biases 0, each plus `noise` · uniform(±1) (0: exactly 1 and 0).
std::vector<NamedTensor> RandomModelTensors(const ExportedModelConfig& config, uint64_t seed,
                                            float noise);

// `tensors` as an export would write them: the config in __metadata__ unless `with_config` is
// false (a file fsdpd-edge must refuse).
absl::Status WriteExportedModel(const std::string& path, const ExportedModelConfig& config,
                                const std::vector<NamedTensor>& tensors, bool with_config = true);

}  // namespace fsdpd::edge
