#include "kernels/cuda/attention_cudnn.h"

#include "kernels/cuda/attention.h"

#ifdef FSDPD_HAS_CUDNN

#include <cudnn.h>

#include <array>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "cudnn_frontend.h"
#include "spdlog/spdlog.h"

namespace fsdpd::cuda::cudnn_attention {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids in the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kOut, kStats, kDout, kDq, kDk, kDv };

struct Key {
  int64_t batch, seq, heads, dim, kv_heads;
  bool causal;
  bool operator<(const Key& other) const {
    return std::tie(batch, seq, heads, dim, kv_heads, causal) <
           std::tie(other.batch, other.seq, other.heads, other.dim, other.kv_heads, other.causal);
  }
};

struct Plans {
  std::shared_ptr<fe::graph::Graph> forward;
  std::shared_ptr<fe::graph::Graph> backward;
  Workspace workspace;
};

// The one cuDNN handle of the process (a worker drives one device) and the built graphs.
struct State {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  absl::Status handle_status = absl::OkStatus();
  bool handle_tried = false;
  std::map<Key, absl::StatusOr<std::shared_ptr<Plans>>> plans;
};

State& GlobalState() {
  static State* state = new State();  // never destroyed: graphs outlive static teardown order
  return *state;
}

Key KeyOf(const AttentionDims& dims, bool causal) {
  return Key{dims.batch, dims.seq, dims.heads, dims.dim, dims.KvHeads(), causal};
}

absl::Status FromFrontend(fe::error_t error, const char* what) {
  if (error.is_good()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cuDNN attention: ", what, ": ", error.get_message()));
}

absl::Status EnsureHandle(State& state) {
  if (!state.handle_tried) {
    state.handle_tried = true;
    const cudnnStatus_t status = cudnnCreate(&state.handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      state.handle = nullptr;
      state.handle_status = absl::UnavailableError(
          absl::StrCat("cuDNN attention: cudnnCreate failed: ", cudnnGetErrorString(status),
                       " (is libcudnn's engine library on the loader path?)"));
      spdlog::warn("attention: {}; the own kernels run every shape",
                   std::string(state.handle_status.message()));
    } else {
      spdlog::info("attention: cuDNN {} fused SDPA available", cudnnGetVersion());
    }
  }
  return state.handle_status;
}

std::shared_ptr<fe::graph::Graph> NewGraph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

int64_t HeadDimOf(const AttentionDims& dims) { return dims.dim / dims.heads; }

// qkv's row: q (dim) then k and v (kv_heads·head_dim each), attention.h's packed layout.
int64_t QkvRowOf(const AttentionDims& dims) {
  return dims.dim + 2 * dims.KvHeads() * HeadDimOf(dims);
}

// Where k and v start in a qkv row.
int64_t KeyOffsetOf(const AttentionDims& dims) { return dims.dim; }
int64_t ValueOffsetOf(const AttentionDims& dims) {
  return dims.dim + dims.KvHeads() * HeadDimOf(dims);
}

// A [batch, heads, seq, head_dim] view with the given row stride (elements between tokens).
// `heads` is the query heads for q, o, do and dq, the kv heads for k, v, dk and dv: the SDPA
// graphs take k and v with fewer heads as grouped-query attention (h_q a multiple of h_k).
std::shared_ptr<fe::graph::Tensor_attributes> HeadView(fe::graph::Graph& graph, const char* name,
                                                       int64_t uid, const AttentionDims& dims,
                                                       int64_t heads, int64_t row_stride) {
  const int64_t head_dim = HeadDimOf(dims);
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({dims.batch, heads, dims.seq, head_dim})
                          .set_stride({dims.seq * row_stride, head_dim, row_stride, 1}));
}

// q, k and v: the three parts of each token's row of qkv.
std::array<std::shared_ptr<fe::graph::Tensor_attributes>, 3> PackedQkv(fe::graph::Graph& graph,
                                                                       const AttentionDims& dims) {
  const int64_t row = QkvRowOf(dims);
  return {HeadView(graph, "q", kQ, dims, dims.heads, row),
          HeadView(graph, "k", kK, dims, dims.KvHeads(), row),
          HeadView(graph, "v", kV, dims, dims.KvHeads(), row)};
}

void MarkOutput(const std::shared_ptr<fe::graph::Tensor_attributes>& tensor, int64_t uid,
                const AttentionDims& dims, int64_t heads, int64_t row_stride) {
  const int64_t head_dim = HeadDimOf(dims);
  tensor->set_output(true)
      .set_uid(uid)
      .set_dim({dims.batch, heads, dims.seq, head_dim})
      .set_stride({dims.seq * row_stride, head_dim, row_stride, 1});
}

std::shared_ptr<fe::graph::Tensor_attributes> StatsView(fe::graph::Graph& graph,
                                                        const AttentionDims& dims) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name("stats")
                          .set_uid(kStats)
                          .set_data_type(fe::DataType_t::FLOAT)
                          .set_dim({dims.batch, dims.heads, dims.seq, 1})
                          .set_stride({dims.heads * dims.seq, dims.seq, 1, 1}));
}

float ScaleOf(const AttentionDims& dims) {
  return 1.0f / std::sqrt(static_cast<float>(dims.dim / dims.heads));
}

absl::Status Build(fe::graph::Graph& graph, cudnnHandle_t handle, const char* what) {
  return FromFrontend(graph.build(handle, {fe::HeurMode_t::A}), what);
}

absl::StatusOr<std::shared_ptr<fe::graph::Graph>> BuildForward(cudnnHandle_t handle,
                                                               const AttentionDims& dims,
                                                               bool causal) {
  std::shared_ptr<fe::graph::Graph> graph = NewGraph();
  auto [q, k, v] = PackedQkv(*graph, dims);
  auto options =
      fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(
          ScaleOf(dims));
  if (causal) options.set_causal_mask(true);
  auto [out, stats] = graph->sdpa(q, k, v, options);
  MarkOutput(out, kOut, dims, dims.heads, dims.dim);
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({dims.batch, dims.heads, dims.seq, 1})
      .set_stride({dims.heads * dims.seq, dims.seq, 1, 1});
  FSDPD_RETURN_IF_ERROR(Build(*graph, handle, "forward graph"));
  return graph;
}

absl::StatusOr<std::shared_ptr<fe::graph::Graph>> BuildBackward(cudnnHandle_t handle,
                                                                const AttentionDims& dims,
                                                                bool causal) {
  std::shared_ptr<fe::graph::Graph> graph = NewGraph();
  auto [q, k, v] = PackedQkv(*graph, dims);
  auto out = HeadView(*graph, "o", kOut, dims, dims.heads, dims.dim);
  auto dout = HeadView(*graph, "do", kDout, dims, dims.heads, dims.dim);
  auto stats = StatsView(*graph, dims);
  auto options =
      fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(ScaleOf(dims));
  if (causal) options.set_causal_mask(true);
  auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, out, dout, stats, options);
  const int64_t row = QkvRowOf(dims);
  MarkOutput(dq, kDq, dims, dims.heads, row);
  MarkOutput(dk, kDk, dims, dims.KvHeads(), row);
  MarkOutput(dv, kDv, dims, dims.KvHeads(), row);
  FSDPD_RETURN_IF_ERROR(Build(*graph, handle, "backward graph"));
  return graph;
}

absl::StatusOr<std::shared_ptr<Plans>> BuildPlans(cudnnHandle_t handle, const AttentionDims& dims,
                                                  bool causal) {
  auto plans = std::make_shared<Plans>();
  try {
    absl::StatusOr<std::shared_ptr<fe::graph::Graph>> forward = BuildForward(handle, dims, causal);
    if (!forward.ok()) return forward.status();
    absl::StatusOr<std::shared_ptr<fe::graph::Graph>> backward =
        BuildBackward(handle, dims, causal);
    if (!backward.ok()) return backward.status();
    plans->forward = *forward;
    plans->backward = *backward;
    FSDPD_RETURN_IF_ERROR(FromFrontend(
        plans->forward->get_workspace_size(plans->workspace.forward_bytes), "forward workspace"));
    FSDPD_RETURN_IF_ERROR(
        FromFrontend(plans->backward->get_workspace_size(plans->workspace.backward_bytes),
                     "backward workspace"));
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat("cuDNN attention: ", error.what()));
  }
  return plans;
}

absl::StatusOr<std::shared_ptr<Plans>> PlansFor(const AttentionDims& dims, bool causal) {
  State& state = GlobalState();
  std::lock_guard<std::mutex> lock(state.mutex);
  FSDPD_RETURN_IF_ERROR(EnsureHandle(state));
  const Key key = KeyOf(dims, causal);
  auto found = state.plans.find(key);
  if (found == state.plans.end()) {
    absl::StatusOr<std::shared_ptr<Plans>> built = BuildPlans(state.handle, dims, causal);
    if (built.ok()) {
      spdlog::info(
          "attention: cuDNN SDPA for batch {} seq {} heads {} kv_heads {} dim {}{} (workspace {} "
          "/ {} bytes)",
          dims.batch, dims.seq, dims.heads, dims.KvHeads(), dims.dim, causal ? " causal" : "",
          (*built)->workspace.forward_bytes, (*built)->workspace.backward_bytes);
    } else {
      spdlog::warn("attention: {}; the own kernels run this shape",
                   std::string(built.status().message()));
    }
    found = state.plans.emplace(key, std::move(built)).first;
  }
  return found->second;
}

absl::Status Execute(const fe::graph::Graph& graph, std::unordered_map<int64_t, void*>& pack,
                     void* workspace, cudaStream_t stream, const char* what) {
  State& state = GlobalState();
  std::lock_guard<std::mutex> lock(state.mutex);
  const cudnnStatus_t set = cudnnSetStream(state.handle, stream);
  if (set != CUDNN_STATUS_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cuDNN attention: cudnnSetStream: ", cudnnGetErrorString(set)));
  }
  return FromFrontend(graph.execute(state.handle, pack, workspace), what);
}

void* Mutable(const void* pointer) { return const_cast<void*>(pointer); }

}  // namespace

bool Compiled() { return true; }

absl::StatusOr<Workspace> Prepare(const AttentionDims& dims, bool causal) {
  absl::StatusOr<std::shared_ptr<Plans>> plans = PlansFor(dims, causal);
  if (!plans.ok()) return plans.status();
  return (*plans)->workspace;
}

absl::Status Forward(const __nv_bfloat16* qkv, const AttentionDims& dims, bool causal,
                     __nv_bfloat16* out, float* lse, void* workspace, cudaStream_t stream) {
  absl::StatusOr<std::shared_ptr<Plans>> plans = PlansFor(dims, causal);
  if (!plans.ok()) return plans.status();
  std::unordered_map<int64_t, void*> pack = {{kQ, Mutable(qkv)},
                                             {kK, Mutable(qkv + KeyOffsetOf(dims))},
                                             {kV, Mutable(qkv + ValueOffsetOf(dims))},
                                             {kOut, out},
                                             {kStats, lse}};
  return Execute(*(*plans)->forward, pack, workspace, stream, "forward");
}

absl::Status Backward(const __nv_bfloat16* dout, const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                      const float* lse, const AttentionDims& dims, bool causal, __nv_bfloat16* dqkv,
                      void* workspace, cudaStream_t stream) {
  absl::StatusOr<std::shared_ptr<Plans>> plans = PlansFor(dims, causal);
  if (!plans.ok()) return plans.status();
  std::unordered_map<int64_t, void*> pack = {{kQ, Mutable(qkv)},
                                             {kK, Mutable(qkv + KeyOffsetOf(dims))},
                                             {kV, Mutable(qkv + ValueOffsetOf(dims))},
                                             {kOut, Mutable(out)},
                                             {kDout, Mutable(dout)},
                                             {kStats, Mutable(lse)},
                                             {kDq, dqkv},
                                             {kDk, dqkv + KeyOffsetOf(dims)},
                                             {kDv, dqkv + ValueOffsetOf(dims)}};
  return Execute(*(*plans)->backward, pack, workspace, stream, "backward");
}

}  // namespace fsdpd::cuda::cudnn_attention

#else  // !FSDPD_HAS_CUDNN

namespace fsdpd::cuda::cudnn_attention {

bool Compiled() { return false; }

absl::StatusOr<Workspace> Prepare(const AttentionDims&, bool) {
  return absl::UnimplementedError("cuDNN attention: this build has no cuDNN (FSDPD_CUDNN=OFF)");
}

absl::Status Forward(const __nv_bfloat16*, const AttentionDims&, bool, __nv_bfloat16*, float*,
                     void*, cudaStream_t) {
  return Prepare(AttentionDims{}, false).status();
}

absl::Status Backward(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                      const float*, const AttentionDims&, bool, __nv_bfloat16*, void*,
                      cudaStream_t) {
  return Prepare(AttentionDims{}, false).status();
}

}  // namespace fsdpd::cuda::cudnn_attention

#endif  // FSDPD_HAS_CUDNN
