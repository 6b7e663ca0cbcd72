// The edge runtime's device layer: the few operations MiniLLM's forward needs, on opaque
// buffers. The CPU backend (the reference, kernels/cpu) and the Vulkan backend implement it;
// a Metal backend would be a third implementation of this interface and nothing else
// (docs/edge.md). Operations are enqueued in order; Finish waits for them and returns the
// first error. Activations are fp32 (MatmulInput's may be fp16); a backend may keep weights in a
// narrower type, and a linear layer's weight may come quantized to int8 (Int8Weight).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "edge/quantize.h"

namespace fsdpd::edge {

// CopyFloats' arguments against the two buffers' sizes in floats, for every backend: compared
// in floats, so that no product can wrap and a huge count cannot pass as a small one.
inline absl::Status CheckCopyRange(int64_t from_floats, int64_t from_offset, int64_t to_floats,
                                   int64_t to_offset, int64_t count) {
  if (from_offset < 0 || to_offset < 0 || count < 0 || from_offset > from_floats - count ||
      to_offset > to_floats - count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyFloats: ", count, " floats from ", from_offset, " to ", to_offset,
                     " fall outside the buffers (", from_floats, " and ", to_floats, " floats)"));
  }
  return absl::OkStatus();
}

// Argmax's arguments against the buffers' sizes (floats of logits, ids of next and history).
inline absl::Status CheckArgmax(int64_t vocab, int64_t logits_floats, int64_t next_ids,
                                int64_t history_ids, int64_t index) {
  if (vocab < 1 || vocab > logits_floats || next_ids < 1 || index < 0 || index >= history_ids) {
    return absl::InvalidArgumentError(
        absl::StrCat("Argmax: a vocab of ", vocab, " in ", logits_floats, " logits, into ",
                     next_ids, " next ids and history[", index, "] of ", history_ids));
  }
  return absl::OkStatus();
}

class Buffer;

// What Backend::FusedLinear folds into a projection out = x · weightᵀ (+ bias):
struct LinearFusion {
  // RmsNorm(x, norm, eps) first: x is the fp32 residual, read unrounded (RmsNorm's output is
  // fp16 where the matmul reads fp16 x), and the product of x·norm is scaled by x's rsqrt after.
  Buffer* norm = nullptr;
  double eps = 0.0;
  bool silu = false;  // out = silu(x · weightᵀ (+ bias)), as Silu computes it
  bool add = false;   // out += the result, as Add adds it (a residual)
  // The rows are written from float out_offset of out on (decoding's qkv into its cache).
  int64_t out_offset = 0;
};

class Buffer {
 public:
  virtual ~Buffer() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // One line for reports: the device and the paths it runs (precision, weight upload).
  virtual std::string Describe() const = 0;

  // A weight tensor from fp32 host values (count floats).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Weight(const float* values, int64_t count) = 0;
  // A linear layer's weight quantized to int8 (edge/quantize.h), [tensor.rows, tensor.cols]: the
  // int8 values and their fp16 scales, for Linear and FusedLinear alone (as `weight`, with
  // out_features = rows and in_features = cols), which multiply by q · scale dequantized in fp32
  // as they read it. Every other use is refused, as is a group size the backend does not read.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Int8Weight(const Int8Tensor& tensor) = 0;
  // The bytes `buffer` takes on the device (or the host, for the CPU backend).
  virtual int64_t Bytes(Buffer& buffer) = 0;
  // Uninitialised fp32 activations, or int32 token ids.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Floats(int64_t count) = 0;
  virtual absl::StatusOr<std::unique_ptr<Buffer>> Ints(int64_t count) = 0;
  // Activations whose only reader is Linear's x (RmsNorm's output before a projection, Silu's
  // before the FFN's down projection). A backend whose matmul reads x as fp16 may store them
  // as fp16, so that no separate cast reads them back: then only RmsNorm, Silu and Add may
  // write them and only Linear may read them (ReadFloats and the other ops refuse them).
  virtual absl::StatusOr<std::unique_ptr<Buffer>> MatmulInput(int64_t count) {
    return Floats(count);
  }
  // Whether `bytes` more of buffers fit beside the live ones: an error naming the sizes where a
  // backend knows they cannot (asked before a batch of allocations, so that a window far too
  // large is refused before any of it is allocated). The default cannot tell and says yes.
  virtual absl::Status CheckRoom(double bytes) { return absl::OkStatus(); }
  // Host ↔ buffer copies; both wait for the work enqueued before them. ReadInts of a count
  // below 0 or past the buffer is INVALID_ARGUMENT on every backend.
  virtual absl::Status WriteInts(Buffer& buffer, const int32_t* values, int64_t count) = 0;
  virtual absl::Status WriteFloats(Buffer& buffer, const float* values, int64_t count) = 0;
  virtual absl::Status ReadFloats(Buffer& buffer, float* values, int64_t count) = 0;
  virtual absl::Status ReadInts(Buffer& buffer, int32_t* values, int64_t count) = 0;

  // out[count, dim] = table[tokens[t]]; ids already checked against the table's rows.
  virtual absl::Status Embedding(Buffer& table, Buffer& tokens, int64_t count, int64_t dim,
                                 Buffer& out) = 0;
  // out = x · rsqrt(mean(x²) + eps) · weight, per row of dim.
  virtual absl::Status RmsNorm(Buffer& x, Buffer& weight, int64_t rows, int64_t dim, double eps,
                               Buffer& out) = 0;
  // out[rows, out_features] = x[rows, in_features] · weightᵀ (+ bias, may be null).
  virtual absl::Status Linear(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows,
                              int64_t in_features, int64_t out_features, Buffer& out) = 0;
  // Decoding's projections with the ops around them folded in (LinearFusion), one op where the
  // model would run two or three, for the few rows FusesIntoLinear(rows) allows; the model runs
  // the ops apart otherwise. The result is what the ops apart compute, up to the rounding
  // LinearFusion states; the CPU backend runs them apart and is the reference.
  virtual bool FusesIntoLinear(int64_t rows) const { return false; }
  virtual absl::Status FusedLinear(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows,
                                   int64_t in_features, int64_t out_features, Buffer& out,
                                   const LinearFusion& fusion) {
    return absl::FailedPreconditionError("this backend does not fold ops into Linear");
  }
  // out[rows, out_features] += x · weightᵀ (+ bias): Linear's result, rounded to fp32, then
  // added to what out holds as Add would add it (a residual), bit for bit. FusedLinear with
  // LinearFusion::add alone.
  absl::Status LinearAdd(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows, int64_t in_features,
                         int64_t out_features, Buffer& out) {
    LinearFusion add;
    add.add = true;
    return FusedLinear(x, weight, bias, rows, in_features, out_features, out, add);
  }
  // nn.MultiheadAttention's core on packed qkv[batch, seq, 3·dim] → out[batch, seq, dim].
  virtual absl::Status Attention(Buffer& qkv, int64_t batch, int64_t seq, int64_t heads,
                                 int64_t dim, bool causal, Buffer& out) = 0;
  // Causal attention for the positions [first, first + rows) of one sequence whose qkv rows
  // for positions [0, first + rows) are in qkv (packed as Attention's): out[rows, dim], each
  // position attending to every position up to its own. One decoding step with a cache of qkv
  // rows (the rows before `first`).
  virtual absl::Status CausalAttentionAt(Buffer& qkv, int64_t first, int64_t rows, int64_t heads,
                                         int64_t dim, Buffer& out) = 0;
  // to[to_offset, to_offset + count) = from[from_offset, …), fp32 elements, in order with the
  // other operations.
  virtual absl::Status CopyFloats(Buffer& from, int64_t from_offset, Buffer& to, int64_t to_offset,
                                  int64_t count) = 0;
  virtual absl::Status Silu(Buffer& x, int64_t count, Buffer& out) = 0;
  virtual absl::Status Add(Buffer& a, Buffer& b, int64_t count, Buffer& out) = 0;
  // nll[r] = logsumexp(logits[r]) − logits[r][targets[r]] (log-softmax, cross-entropy).
  virtual absl::Status TokenNll(Buffer& logits, Buffer& targets, int64_t rows, int64_t vocab,
                                Buffer& nll) = 0;
  // Greedy decoding's pick of logits[0, vocab) by edge/argmax.h's rule, into the int32 ids
  // next[0] and history[index], in order with the other operations: the next step's Embedding
  // reads `next` with no wait for the host, which reads `history` once for several steps.
  virtual absl::Status Argmax(Buffer& logits, int64_t vocab, Buffer& next, Buffer& history,
                              int64_t index) = 0;

  virtual absl::Status Finish() = 0;
};

}  // namespace fsdpd::edge
