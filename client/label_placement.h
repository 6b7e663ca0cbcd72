// Names beside the marks of a chart, placed so that no two overlap, none covers a fixed text
// (a roof's label) and all stay inside the plot. Each label tries spots around its mark (right,
// left, above, below), then spots further up and down joined to the mark by a leader line; it
// takes the first spot that is free and covers no other mark, else the first free one. A label
// with no free spot is left out (its mark's tooltip still names it). Labels are placed in the
// order given: put the most important first.
#pragma once

#include <string>
#include <vector>

#include "client/svg_text.h"

namespace fsdpd::client {

struct ChartMark {
  double x = 0;
  double y = 0;
  double radius = 0;
};

struct LabelPlacement {
  bool placed = false;
  double x = 0;  // the text's anchor point
  double y = 0;  // its baseline
  TextAnchor anchor = TextAnchor::kStart;
  Box box;
  bool leader = false;  // a line from (leader_x1, leader_y1) on the mark to the label
  double leader_x1 = 0;
  double leader_y1 = 0;
  double leader_x2 = 0;
  double leader_y2 = 0;
};

// texts[i] labels marks[mark_of[i]]. `obstacles` are boxes no label may overlap; `bounds` is
// where every label must lie.
std::vector<LabelPlacement> PlaceLabels(const std::vector<ChartMark>& marks,
                                        const std::vector<std::string>& texts,
                                        const std::vector<size_t>& mark_of,
                                        const std::vector<Box>& obstacles, const Box& bounds,
                                        double font_size);

}  // namespace fsdpd::client
