// The roofline chart of a profiling window as an SVG document, drawn like Nsight Compute's:
// arithmetic intensity (FLOP per byte) against achieved FLOP/s on log axes, under the memory roof
// (peak bandwidth × intensity) and the compute roof (peak FLOP/s). Each kernel row with a known
// cost is one mark (<circle class="kernel">), its area proportional to its time and its colour
// its verdict; the top kernels by time are labelled. Rows without a cost (collectives, ops of
// unknown FLOPs) cannot be placed: the chart says how many it leaves out.
// Layout: every text lies inside the canvas and no two texts overlap, by the font metrics of
// client/svg_text.h: the header and legend wrap, tick labels thin out, and kernel labels move
// around their marks (client/label_placement.h) or are left out and counted in the legend.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "fsdpd/v1/profile.pb.h"

namespace fsdpd::client {

struct RooflineOptions {
  int width = 960;              // at least 640
  int height = 600;             // at least 400
  size_t labelled_kernels = 5;  // the top kernels by time that get a name beside their mark
  std::string title;            // e.g. "job-000001 rank 0 on cpu, steps 5..7"
};

// Whether a kernel row can be placed on the chart: positive FLOPs, bytes and time.
bool HasRooflinePoint(const v1::KernelStat& kernel);

// The SVG text, or INVALID_ARGUMENT when the report has no peaks (a worker that does not send
// them) or no kernel that can be placed.
absl::StatusOr<std::string> RenderRooflineSvg(const v1::ProfileReport& report,
                                              const RooflineOptions& options);

}  // namespace fsdpd::client
