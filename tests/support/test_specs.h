// Job specs that tests build as protos, written once for every test binary.
#pragma once

#include <cstdint>
#include <string>

#include "fsdpd/v1/spec.pb.h"
#include "nlohmann/json.hpp"

namespace fsdpd::testing {

// The spec, after a test failure naming each invalid field (ValidateJobSpec). A spec built in a
// test enters here, as a submitted one enters the coordinator: RunTrainer trusts its spec and
// checks only the rank's context. The builders below return their spec through it.
v1::JobSpec Validated(v1::JobSpec spec);

// The smallest valid CPU job: the defaults of proto/spec/job_spec.h with a 2-layer, 64-wide
// MiniLLM, sequences of 32 tokens, batches of 2, one fp32 rank. Named "tiny".
v1::JobSpec TinyJobSpec();

// tests/golden/tiny, PyTorch's fixtures (tests/golden/make_fixtures.py), under
// $FSDPD_SOURCE_DIR or else the source tree the tests were built from.
std::string GoldenTinyDir();
// Its config.json; an empty object where the file is missing or unreadable.
nlohmann::json GoldenTinyConfig();

// The golden tiny job as the fixtures made it: their model, token file, batch, AdamW
// hyperparameters and initial weights, a constant `lr`, bf16 parameters, `world` ranks on
// `device`, no checkpoints. Tests change what they need from there.
v1::JobSpec GoldenTinySpec(const nlohmann::json& config, const std::string& device, int world,
                           int64_t steps, double lr);

// A Llama fixture folder of tests/golden (tests/golden/make_llama_fixtures.py): llama_tiny or
// llama_tiny_tied, and its config.json (an empty object where missing).
std::string GoldenLlamaDir(const std::string& fixture);
nlohmann::json GoldenLlamaConfig(const std::string& fixture);

// The golden Llama job, as GoldenTinySpec makes MiniLLM's: model.arch llama with the fixture's
// kv_heads, ffn_dim, rope_theta, norm_eps and tie_embeddings.
v1::JobSpec GoldenLlamaSpec(const std::string& fixture, const std::string& device, int world,
                            int64_t steps, double lr);

}  // namespace fsdpd::testing
