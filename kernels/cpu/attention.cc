#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace fsdpd::cpu {
namespace {

// Pointers to one (batch, query head) slice of the packed tensors; rows are strided.
struct HeadSlices {
  int64_t head_dim;
  int64_t qkv_stride;  // (heads + 2·kv_heads)·head_dim: 3·dim without grouping
  int64_t out_stride;  // dim
  int64_t q_offset;
  int64_t k_offset;  // of the head's kv head; v follows at +kv_heads·head_dim
  int64_t v_offset;
  int64_t out_offset;
  bool first_of_group;  // the group's first query head: it overwrites dk and dv, the rest add
};

HeadSlices Slices(const AttentionShape& shape, int64_t b, int64_t h) {
  const int64_t head_dim = shape.dim / shape.heads;
  const int64_t kv_heads = shape.KvHeads();
  const int64_t group = shape.heads / kv_heads;
  const int64_t kv_dim = kv_heads * head_dim;
  const int64_t stride = shape.dim + 2 * kv_dim;
  const int64_t row0 = b * shape.seq * stride;
  const int64_t kv = h / group;
  return HeadSlices{head_dim,
                    stride,
                    shape.dim,
                    row0 + h * head_dim,
                    row0 + shape.dim + kv * head_dim,
                    row0 + shape.dim + kv_dim + kv * head_dim,
                    b * shape.seq * shape.dim + h * head_dim,
                    h % group == 0};
}

// scores[seq, seq] = scale · q·kᵀ.
void Scores(const float* q, const float* k, int64_t stride, int64_t seq, int64_t head_dim,
            float scale, float* scores) {
  Gemm(false, true, seq, seq, head_dim, scale, q, stride, k, stride, 0.0f, scores, seq);
}

// Score rows [rows, cols] of queries at positions first, first + 1, … against the keys at
// positions 0, 1, …: causal masks the keys after each query's position.
struct ScoreRows {
  int64_t rows;
  int64_t cols;
  bool causal;
  int64_t first = 0;
  int64_t Visible(int64_t row) const { return causal ? first + row + 1 : cols; }
};

// Each row's log-sum-exp over its visible columns.
void RowLogSumExp(const float* scores, const ScoreRows& shape, float* lse) {
  for (int64_t i = 0; i < shape.rows; ++i) {
    const float* row = scores + i * shape.cols;
    const int64_t visible = shape.Visible(i);
    float maximum = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < visible; ++j) maximum = std::max(maximum, row[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < visible; ++j) sum += std::exp(row[j] - maximum);
    lse[i] = maximum + static_cast<float>(std::log(sum));
  }
}

// scores → softmax probabilities in place, from each row's log-sum-exp; masked entries are
// exactly zero.
void ExponentiateRows(const float* lse, const ScoreRows& shape, float* scores) {
  for (int64_t i = 0; i < shape.rows; ++i) {
    float* row = scores + i * shape.cols;
    const int64_t visible = shape.Visible(i);
    for (int64_t j = 0; j < visible; ++j) row[j] = std::exp(row[j] - lse[i]);
    for (int64_t j = visible; j < shape.cols; ++j) row[j] = 0.0f;
  }
}

// One head's forward over `shape`'s score rows: queries q (their first row is the query at
// position shape.first), keys k and values v from position 0, all rows `stride` apart;
// scores[rows, cols] as scratch, lse[rows], out's rows out_stride apart.
void HeadForward(const float* q, const float* k, const float* v, int64_t stride, int64_t head_dim,
                 const ScoreRows& shape, float* scores, float* lse, float* out,
                 int64_t out_stride) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  Gemm(false, true, shape.rows, shape.cols, head_dim, scale, q, stride, k, stride, 0.0f, scores,
       shape.cols);
  RowLogSumExp(scores, shape, lse);
  ExponentiateRows(lse, shape, scores);
  Gemm(false, false, shape.rows, head_dim, shape.cols, 1.0f, scores, shape.cols, v, stride, 0.0f,
       out, out_stride);
}

}  // namespace

void AttentionForward(const float* qkv, const AttentionShape& shape, bool causal, float* out,
                      float* lse) {
  const int64_t seq = shape.seq;
  std::vector<float> scores(static_cast<size_t>(seq * seq));
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const HeadSlices slices = Slices(shape, b, h);
      HeadForward(qkv + slices.q_offset, qkv + slices.k_offset, qkv + slices.v_offset,
                  slices.qkv_stride, slices.head_dim, {seq, seq, causal}, scores.data(),
                  lse + (b * shape.heads + h) * seq, out + slices.out_offset, slices.out_stride);
    }
  }
}

void CausalAttentionRows(const float* qkv, int64_t heads, int64_t dim, int64_t first, int64_t rows,
                         float* out) {
  const int64_t keys = first + rows;
  const AttentionShape shape{1, keys, heads, dim};
  const ScoreRows score_rows{rows, keys, /*causal=*/true, first};
  std::vector<float> scores(static_cast<size_t>(rows * keys));
  std::vector<float> lse(static_cast<size_t>(rows));
  for (int64_t h = 0; h < heads; ++h) {
    const HeadSlices slices = Slices(shape, 0, h);
    HeadForward(qkv + slices.q_offset + first * slices.qkv_stride, qkv + slices.k_offset,
                qkv + slices.v_offset, slices.qkv_stride, slices.head_dim, score_rows,
                scores.data(), lse.data(), out + h * slices.head_dim, dim);
  }
}

void AttentionBackward(const float* dout, const float* qkv, const float* out, const float* lse,
                       const AttentionShape& shape, bool causal, float* dqkv) {
  const int64_t seq = shape.seq;
  std::vector<float> probabilities(static_cast<size_t>(seq * seq));
  std::vector<float> score_gradient(static_cast<size_t>(seq * seq));
  std::vector<float> row_dot(static_cast<size_t>(seq));
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const HeadSlices slices = Slices(shape, b, h);
      const int64_t head_dim = slices.head_dim;
      const int64_t stride = slices.qkv_stride;
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const float* q = qkv + slices.q_offset;
      const float* k = qkv + slices.k_offset;
      const float* v = qkv + slices.v_offset;
      float* dq = dqkv + slices.q_offset;
      float* dk = dqkv + slices.k_offset;
      float* dv = dqkv + slices.v_offset;
      // The group's first query head writes its kv head's dk and dv, the others add to them.
      const float kv_beta = slices.first_of_group ? 0.0f : 1.0f;
      const float* head_dout = dout + slices.out_offset;
      const float* head_out = out + slices.out_offset;
      // P is recomputed from the saved log-sum-exp rather than stored by forward.
      Scores(q, k, stride, seq, head_dim, scale, probabilities.data());
      ExponentiateRows(lse + (b * shape.heads + h) * seq, {seq, seq, causal}, probabilities.data());

      // dv = Pᵀ · dout; dP = dout · vᵀ.
      Gemm(true, false, seq, head_dim, seq, 1.0f, probabilities.data(), seq, head_dout,
           slices.out_stride, kv_beta, dv, stride);
      Gemm(false, true, seq, seq, head_dim, 1.0f, head_dout, slices.out_stride, v, stride, 0.0f,
           score_gradient.data(), seq);
      // Softmax backward: dS = P ∘ (dP − rowsum(dout ∘ out)), since Σ_j P_ij dP_ij = dout_i·out_i.
      for (int64_t i = 0; i < seq; ++i) {
        double dot = 0.0;
        for (int64_t d = 0; d < head_dim; ++d) {
          dot += static_cast<double>(head_dout[i * slices.out_stride + d]) *
                 head_out[i * slices.out_stride + d];
        }
        row_dot[i] = static_cast<float>(dot);
      }
      for (int64_t i = 0; i < seq; ++i) {
        float* gradient_row = score_gradient.data() + i * seq;
        const float* probability_row = probabilities.data() + i * seq;
        for (int64_t j = 0; j < seq; ++j) {
          gradient_row[j] = probability_row[j] * (gradient_row[j] - row_dot[i]);
        }
      }
      // scores = scale · q·kᵀ, so dq = scale · dS · k and dk = scale · dSᵀ · q.
      Gemm(false, false, seq, head_dim, seq, scale, score_gradient.data(), seq, k, stride, 0.0f, dq,
           stride);
      Gemm(true, false, seq, head_dim, seq, scale, score_gradient.data(), seq, q, stride, kv_beta,
           dk, stride);
    }
  }
}

}  // namespace fsdpd::cpu
