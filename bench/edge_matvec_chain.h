// Decoding's projections as a chain of matvecs on a Vulkan device (bench/edge_shaders/
// matvec_chain.comp), three ways: one dispatch a stage, as decoding runs its ops today; one
// dispatch for the whole chain, its workgroups meeting at a grid-wide barrier between stages (a
// persistent kernel); and that with each stage's first weights read before the barrier. The
// same stages, the same reads and the same order of addition in each: where the persistent
// chain's time is well below the dispatches', a persistent decoding kernel would gain as much.
// A probe for bench/edge_bench.cc (--matvec-chain): nothing a model uses.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "edge/vulkan_context.h"

namespace fsdpd::edge {

struct ChainStage {
  int64_t n = 0;  // rows (outputs)
  int64_t k = 0;  // inputs: the first k outputs of the stage before (or of x)
};

// A chain's weights, stage after stage, each [n, k] row-major: fp16 as IEEE halves, or int8
// with one fp32 scale a row (weight = q · scale).
struct MatvecChain {
  std::vector<ChainStage> stages;
  bool int8 = false;
  std::vector<uint16_t> halves;   // fp16
  std::vector<int8_t> bytes;      // int8
  std::vector<float> row_scales;  // int8: a row's scale, stage after stage
};

// Decoding's projections on `layers` layers of a MiniLLM: qkv (3·dim × dim), out_proj (dim ×
// dim), ffn.0 (ffn_mult·dim × dim) and ffn.2 (dim × ffn_mult·dim) a layer.
std::vector<ChainStage> DecodingStages(int64_t dim, int64_t ffn_mult, int64_t layers);

// Uniform random weights of about unit gain a stage (±√(3/k) before rounding), from `seed`.
MatvecChain RandomMatvecChain(std::vector<ChainStage> stages, bool int8, uint64_t seed);

// OK where the chain can run with `lanes` lanes a subgroup: stages there; every n and k above
// 0; every k a whole number of rounds (8 fp16 or 16 int8 weights a read, 4 reads a lane in
// flight: 32·lanes or 64·lanes) and at most the last stage's n; the weights' bytes and x within
// `max_buffer` bytes a buffer; as many weights (and int8 row scales) as the stages need.
// INVALID_ARGUMENT naming what does not hold otherwise.
absl::Status CheckMatvecChain(const MatvecChain& chain, uint32_t lanes, uint64_t max_buffer);

// The chain's output (the last stage's n values) in double sums of the stored weights' values.
std::vector<double> MatvecChainReference(const MatvecChain& chain, const std::vector<float>& x);

enum class ChainOrder {
  kDispatchEach,        // one dispatch a stage, a pipeline barrier between them
  kPersistent,          // one dispatch, a grid-wide barrier between stages
  kPersistentPrefetch,  // and each stage's first weights read before its barrier
};
// "a dispatch a stage", "persistent", "persistent, early reads".
const char* ChainOrderName(ChainOrder order);

// The chain on a device, its weights placed once (device-local, through staging).
class MatvecChainOnDevice {
 public:
  // Checks the chain (CheckMatvecChain with the device's subgroup size and
  // maxStorageBufferRange) and places it.
  static absl::StatusOr<std::unique_ptr<MatvecChainOnDevice>> Create(VulkanContext& context,
                                                                     const MatvecChain& chain);
  ~MatvecChainOnDevice();
  MatvecChainOnDevice(const MatvecChainOnDevice&) = delete;
  MatvecChainOnDevice& operator=(const MatvecChainOnDevice&) = delete;

  // The output of the chain on x (stages[0].k values), run once in `order`; the persistent
  // orders on `groups` workgroups, which must all run at once: FAILED_PRECONDITION saying so
  // where they did not.
  absl::StatusOr<std::vector<float>> Run(const std::vector<float>& x, ChainOrder order,
                                         uint32_t groups);
  // Microseconds a chain in `order`, the best of three after a quarter second of warm-up
  // (on whatever x holds); FAILED_PRECONDITION as Run.
  absl::StatusOr<double> Time(ChainOrder order, uint32_t groups);

 private:
  MatvecChainOnDevice(VulkanContext& context, const MatvecChain& chain);
  absl::Status Record(ChainOrder order, uint32_t groups);
  absl::Status CheckGridBarriers(uint32_t groups) const;  // after a Finish
  // The grid-wide barriers' count and its give-up flag back to zero, nothing in flight: each
  // Run and Time starts afresh, whatever a run before left (one that gave up leaves the count
  // short).
  void ZeroCount();

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdpd::edge
