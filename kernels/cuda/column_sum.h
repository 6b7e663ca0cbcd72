// The bias gradient where no GEMM epilogue computes it: dbias[c] (+)= Σ_r dout[r, c] for a bf16
// dout[rows, columns], in fp32, in a fixed order so that the same inputs give the same bits.
// The rows are cut into chunks of 256; one block sums a chunk for 32 columns (its 8 warps over
// interleaved rows, then the 8 warps' sums in order) into `partials`, and a second pass adds the
// chunks' sums in order. Both passes spread over the whole GPU, where one thread a column
// walking all rows would leave most SMs idle and each thread waiting on one load at a time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fsdpd::cuda {

// The device floats ColumnSumBf16 needs as `partials`.
int64_t ColumnSumScratchFloats(int64_t rows, int64_t columns);

// accumulate false overwrites dbias.
absl::Status ColumnSumBf16(const __nv_bfloat16* dout, int64_t rows, int64_t columns,
                           bool accumulate, float* dbias, float* partials, cudaStream_t stream);

}  // namespace fsdpd::cuda
