// What edge_bench prints for its probes (bench/edge_probes.h, bench/edge_matvec_chain.h), each on
// a Vulkan context of its own: the matrix units alone (--mma-peak), the staged blocks taken apart
// (--staged-breakdown), what ordering decoding's ops costs (--sync-floor) and decoding's
// projections as a chain (--matvec-chain). Each returns the failures it counted: a probe a
// device cannot run (no workgroup-scope matrices, workgroups that do not all run at once) is
// reported and is not a failure; a wrong result, or a context that does not open, is.
#pragma once

#include <cstdint>

#include "edge/model.h"

namespace fsdpd::edge {

int ReportMatrixUnitPeak(int device);
int ReportStagedBreakdown(int device, int64_t rows, int64_t dim, int64_t ffn_mult);
int ReportSyncFloor(int device);
int ReportMatvecChain(int device, const ExportedModelConfig& config);

}  // namespace fsdpd::edge
