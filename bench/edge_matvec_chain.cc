#include "bench/edge_matvec_chain.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "bench/edge_probe_support.h"
#include "bench/edge_shaders/variants.h"
#include "formats/half.h"

namespace fsdpd::edge {
namespace {

constexpr uint32_t kThreads = 128;  // matvec_chain.comp's local size
constexpr int64_t kInFlight = 4;    // its IN_FLIGHT

// matvec_chain.comp's Stage.
struct StageRecord {
  uint32_t n, k, weights, scales;
};
struct Push {
  uint32_t first, count, span, base, groups, spin_limit;
};
static_assert(sizeof(Push) == 24);

int64_t WeightsARead(bool int8) { return int8 ? 16 : 8; }

// Floats in each half of x: every stage's input and output, a multiple of 4.
int64_t Span(const std::vector<ChainStage>& stages) {
  int64_t span = 0;
  for (const ChainStage& stage : stages) span = std::max({span, stage.n, stage.k});
  return (span + 3) / 4 * 4;
}

ProbeShader ShaderOf(bool int8, ChainOrder order) {
  switch (order) {
    case ChainOrder::kDispatchEach:
      return int8 ? ProbeShader::kMatvecChainInt8 : ProbeShader::kMatvecChainF16;
    case ChainOrder::kPersistent:
      return int8 ? ProbeShader::kMatvecChainInt8Persistent
                  : ProbeShader::kMatvecChainF16Persistent;
    case ChainOrder::kPersistentPrefetch:
      break;
  }
  return int8 ? ProbeShader::kMatvecChainInt8Prefetch : ProbeShader::kMatvecChainF16Prefetch;
}

}  // namespace

std::vector<ChainStage> DecodingStages(int64_t dim, int64_t ffn_mult, int64_t layers) {
  std::vector<ChainStage> stages;
  for (int64_t layer = 0; layer < layers; ++layer) {
    stages.push_back({3 * dim, dim});
    stages.push_back({dim, dim});
    stages.push_back({ffn_mult * dim, dim});
    stages.push_back({dim, ffn_mult * dim});
  }
  return stages;
}

MatvecChain RandomMatvecChain(std::vector<ChainStage> stages, bool int8, uint64_t seed) {
  MatvecChain chain;
  chain.stages = std::move(stages);
  chain.int8 = int8;
  // SplitMix64, four 16-bit draws a step: the seed's chain is 600M weights, which the standard
  // distributions took tens of seconds to draw.
  uint64_t state = seed;
  uint64_t bits = 0;
  int left = 0;
  auto draw = [&]() -> uint32_t {  // 16 random bits
    if (left == 0) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      bits = z ^ (z >> 31);
      left = 4;
    }
    const auto value = static_cast<uint32_t>(bits & 0xFFFF);
    bits >>= 16;
    --left;
    return value;
  };
  auto unit = [&]() { return static_cast<float>(draw()) / 32767.5f - 1.0f; };  // [-1, 1]
  int64_t weights = 0, rows = 0;
  for (const ChainStage& stage : chain.stages) {
    weights += stage.n * stage.k;
    rows += stage.n;
  }
  if (int8) {
    chain.bytes.reserve(static_cast<size_t>(weights));
    chain.row_scales.reserve(static_cast<size_t>(rows));
  } else {
    chain.halves.reserve(static_cast<size_t>(weights));
  }
  for (const ChainStage& stage : chain.stages) {
    const float bound = std::sqrt(3.0f / static_cast<float>(stage.k));
    if (!int8) {
      for (int64_t i = 0; i < stage.n * stage.k; ++i) {
        chain.halves.push_back(FloatToHalf(bound * unit()));
      }
      continue;
    }
    // Per row: q in [-127, 127], its scale bound / 127 times a factor in [0.5, 1.5].
    for (int64_t row = 0; row < stage.n; ++row) {
      chain.row_scales.push_back(bound / 127.0f * (1.0f + 0.5f * unit()));
      for (int64_t i = 0; i < stage.k; ++i) {
        chain.bytes.push_back(static_cast<int8_t>(std::lround(127.0f * unit())));
      }
    }
  }
  return chain;
}

absl::Status CheckMatvecChain(const MatvecChain& chain, uint32_t lanes, uint64_t max_buffer) {
  if (chain.stages.empty()) return absl::InvalidArgumentError("a matvec chain needs a stage");
  const int64_t round = WeightsARead(chain.int8) * kInFlight * lanes;
  uint64_t weight_bytes = 0;
  for (size_t s = 0; s < chain.stages.size(); ++s) {
    const ChainStage& stage = chain.stages[s];
    if (stage.n <= 0 || stage.k <= 0 || stage.k % round != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("matvec chain stage ", s, " is ", stage.n, " x ", stage.k,
                       ": its n and k must be above 0 "
                       "and k a multiple of ",
                       round, " (", WeightsARead(chain.int8), " weights a read, ", kInFlight,
                       " reads in flight, ", lanes, " lanes a subgroup)"));
    }
    const int64_t input = s == 0 ? stage.k : chain.stages[s - 1].n;
    if (s > 0 && stage.k > input) {
      return absl::InvalidArgumentError(absl::StrCat("matvec chain stage ", s, " reads ", stage.k,
                                                     " inputs; the stage before writes ", input));
    }
    weight_bytes += static_cast<uint64_t>(stage.n * stage.k) * (chain.int8 ? 1 : 2);
  }
  const uint64_t x_bytes = static_cast<uint64_t>(Span(chain.stages)) * 2 * 4;
  if (weight_bytes > max_buffer || x_bytes > max_buffer) {
    return absl::InvalidArgumentError(absl::StrCat("a matvec chain of ", weight_bytes,
                                                   " bytes of weights is more than one buffer "
                                                   "holds here (",
                                                   max_buffer, " bytes): fewer stages"));
  }
  const size_t stored = chain.int8 ? chain.bytes.size() : chain.halves.size();
  int64_t rows = 0;
  for (const ChainStage& stage : chain.stages) rows += stage.n;
  if (stored * (chain.int8 ? 1 : 2) != weight_bytes ||
      (chain.int8 && chain.row_scales.size() != static_cast<size_t>(rows))) {
    return absl::InvalidArgumentError("a matvec chain's weights do not match its stages");
  }
  return absl::OkStatus();
}

std::vector<double> MatvecChainReference(const MatvecChain& chain, const std::vector<float>& x) {
  std::vector<double> input(x.begin(), x.end()), output;
  size_t weight = 0, scale = 0;
  for (const ChainStage& stage : chain.stages) {
    output.assign(static_cast<size_t>(stage.n), 0.0);
    for (int64_t row = 0; row < stage.n; ++row) {
      double sum = 0.0;
      for (int64_t i = 0; i < stage.k; ++i, ++weight) {
        const double value = chain.int8 ? chain.bytes[weight] : HalfToFloat(chain.halves[weight]);
        sum += value * input[static_cast<size_t>(i)];
      }
      output[static_cast<size_t>(row)] = chain.int8 ? sum * chain.row_scales[scale++] : sum;
    }
    input = output;
  }
  return output;
}

const char* ChainOrderName(ChainOrder order) {
  switch (order) {
    case ChainOrder::kDispatchEach:
      return "a dispatch a stage";
    case ChainOrder::kPersistent:
      return "persistent";
    case ChainOrder::kPersistentPrefetch:
      break;
  }
  return "persistent, early reads";
}

struct MatvecChainOnDevice::Impl {
  explicit Impl(VulkanContext& context)
      : context(context),
        pipelines{ScopedPipeline(context), ScopedPipeline(context), ScopedPipeline(context)} {}
  VulkanContext& context;
  std::vector<ChainStage> stages;
  uint32_t span = 0;
  std::unique_ptr<VulkanBuffer> records, weights, scales, x, sync;
  ScopedPipeline pipelines[3];  // by ChainOrder
  uint32_t base = 0;            // grid-wide arrivals recorded since the count was last zeroed
};

MatvecChainOnDevice::MatvecChainOnDevice(VulkanContext& context, const MatvecChain& chain)
    : impl_(std::make_unique<Impl>(context)) {
  impl_->stages = chain.stages;
  impl_->span = static_cast<uint32_t>(Span(chain.stages));
}

MatvecChainOnDevice::~MatvecChainOnDevice() = default;

absl::StatusOr<std::unique_ptr<MatvecChainOnDevice>> MatvecChainOnDevice::Create(
    VulkanContext& context, const MatvecChain& chain) {
  FSDPD_RETURN_IF_ERROR(CheckMatvecChain(chain, context.info().subgroup_size,
                                         context.limits().maxStorageBufferRange));
  std::unique_ptr<MatvecChainOnDevice> device(new MatvecChainOnDevice(context, chain));
  Impl& impl = *device->impl_;
  for (const ChainOrder order :
       {ChainOrder::kDispatchEach, ChainOrder::kPersistent, ChainOrder::kPersistentPrefetch}) {
    FSDPD_RETURN_IF_ERROR(
        impl.pipelines[static_cast<int>(order)].Make(VariantOf(ShaderOf(chain.int8, order))));
  }
  std::vector<StageRecord> records;
  uint64_t vectors = 0, rows = 0;
  for (const ChainStage& stage : chain.stages) {
    records.push_back({static_cast<uint32_t>(stage.n), static_cast<uint32_t>(stage.k),
                       static_cast<uint32_t>(vectors), static_cast<uint32_t>(rows)});
    vectors += static_cast<uint64_t>(stage.n * stage.k / WeightsARead(chain.int8));
    rows += static_cast<uint64_t>(stage.n);
  }
  FSDPD_ASSIGN_OR_RETURN(impl.records,
                         context.CreateFilledBuffer(records.data(), records.size() * 16, false));
  const void* weights = chain.int8 ? static_cast<const void*>(chain.bytes.data())
                                   : static_cast<const void*>(chain.halves.data());
  FSDPD_ASSIGN_OR_RETURN(impl.weights, context.CreateFilledBuffer(weights, vectors * 16, false));
  const std::vector<float> no_scales(1, 1.0f);
  const std::vector<float>& scales = chain.int8 ? chain.row_scales : no_scales;
  FSDPD_ASSIGN_OR_RETURN(impl.scales,
                         context.CreateFilledBuffer(scales.data(), scales.size() * 4, false));
  FSDPD_ASSIGN_OR_RETURN(impl.x, context.CreateBuffer(uint64_t{impl.span} * 8, true));
  FSDPD_ASSIGN_OR_RETURN(impl.sync, context.CreateBuffer(8, true));
  if (impl.x->mapped == nullptr || impl.sync->mapped == nullptr) {
    return absl::InternalError("a host-visible buffer is not mapped");
  }
  std::memset(impl.x->mapped, 0, uint64_t{impl.span} * 8);
  std::memset(impl.sync->mapped, 0, 8);
  return device;
}

absl::Status MatvecChainOnDevice::Record(ChainOrder order, uint32_t groups) {
  Impl& impl = *impl_;
  const Pipeline& pipeline = impl.pipelines[static_cast<int>(order)].get();
  const uint32_t count = static_cast<uint32_t>(impl.stages.size());
  const uint32_t limit = impl.context.limits().maxComputeWorkGroupCount[0];
  auto dispatch = [&](const Push& push, uint32_t x_groups) {
    return impl.context.Dispatch(
        pipeline,
        {impl.records.get(), impl.weights.get(), impl.scales.get(), impl.x.get(), impl.sync.get()},
        &push, x_groups, 1);
  };
  if (order == ChainOrder::kDispatchEach) {
    const uint32_t rows_a_group = 2 * kThreads / impl.context.info().subgroup_size;
    for (uint32_t s = 0; s < count; ++s) {
      const auto grid = static_cast<uint32_t>(
          std::min<int64_t>((impl.stages[s].n + rows_a_group - 1) / rows_a_group, limit));
      FSDPD_RETURN_IF_ERROR(dispatch({s, 1, impl.span, 0, 1, kGridSpinLimit}, grid));
    }
    return absl::OkStatus();
  }
  FSDPD_RETURN_IF_ERROR(CheckProbeGroups(impl.context, groups));
  const uint64_t arrivals = uint64_t{count - 1} * groups;
  if (arrivals >= (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("a persistent chain of ", count, " stages on ",
                                                   groups, " workgroups counts past 2^31"));
  }
  if (impl.base + arrivals >= (uint64_t{1} << 31)) {  // zero the count before it could wrap
    FSDPD_RETURN_IF_ERROR(impl.context.Finish());
    FSDPD_RETURN_IF_ERROR(CheckGridBarriers(groups));
    ZeroCount();
  }
  FSDPD_RETURN_IF_ERROR(dispatch({0, count, impl.span, impl.base, groups, kGridSpinLimit}, groups));
  impl.base += static_cast<uint32_t>(arrivals);
  return absl::OkStatus();
}

void MatvecChainOnDevice::ZeroCount() {
  std::memset(impl_->sync->mapped, 0, 8);  // host-coherent: the next submit sees it
  impl_->base = 0;
}

absl::Status MatvecChainOnDevice::CheckGridBarriers(uint32_t groups) const {
  const auto* words = static_cast<const uint32_t*>(impl_->sync->mapped);
  return GridBarrierOutcome(groups, words[0], words[1] != 0, impl_->base);
}

absl::StatusOr<std::vector<float>> MatvecChainOnDevice::Run(const std::vector<float>& x,
                                                            ChainOrder order, uint32_t groups) {
  Impl& impl = *impl_;
  if (x.size() != static_cast<size_t>(impl.stages.front().k)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the chain reads ", impl.stages.front().k, " inputs; got ", x.size()));
  }
  FSDPD_RETURN_IF_ERROR(impl.context.Finish());
  ZeroCount();
  // Poisoned, both halves, so that an output nothing wrote shows: then x in half 0.
  auto* floats = static_cast<float*>(impl.x->mapped);
  std::fill(floats, floats + 2 * uint64_t{impl.span}, std::nanf(""));
  std::copy(x.begin(), x.end(), floats);
  FSDPD_RETURN_IF_ERROR(Record(order, groups));
  FSDPD_RETURN_IF_ERROR(impl.context.Finish());
  if (order != ChainOrder::kDispatchEach) FSDPD_RETURN_IF_ERROR(CheckGridBarriers(groups));
  const size_t stages = impl.stages.size();
  const float* out = floats + (stages % 2) * uint64_t{impl.span};
  return std::vector<float>(out, out + impl.stages.back().n);
}

absl::StatusOr<double> MatvecChainOnDevice::Time(ChainOrder order, uint32_t groups) {
  FSDPD_RETURN_IF_ERROR(impl_->context.Finish());
  ZeroCount();
  FSDPD_ASSIGN_OR_RETURN(const double seconds,
                         BestSeconds(impl_->context, [&] { return Record(order, groups); }));
  if (order != ChainOrder::kDispatchEach) FSDPD_RETURN_IF_ERROR(CheckGridBarriers(groups));
  return seconds * 1e6;
}

}  // namespace fsdpd::edge
