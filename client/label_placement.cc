#include "client/label_placement.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace fsdpd::client {
namespace {

constexpr double kGap = 4;        // between a mark's edge and its label
constexpr int kLeaderSteps = 10;  // the farthest spot, in lines above or below the mark
constexpr double kPadding = 1.5;  // kept clear around each placed label

Box Padded(const Box& box) {
  return Box{box.left - kPadding, box.top - kPadding, box.right + kPadding, box.bottom + kPadding};
}

// The spots tried for a label of `text` beside `mark`, best first.
std::vector<LabelPlacement> Candidates(const ChartMark& mark, const std::string& text,
                                       double font_size) {
  std::vector<LabelPlacement> spots;
  const double middle = mark.y + 0.35 * font_size;  // a baseline that centres the text on y
  auto add = [&](double x, double y, TextAnchor anchor) {
    LabelPlacement spot;
    spot.placed = true;
    spot.x = x;
    spot.y = y;
    spot.anchor = anchor;
    spot.box = TextBox(text, x, y, font_size, anchor);
    spots.push_back(spot);
    return &spots.back();
  };
  add(mark.x + mark.radius + kGap, middle, TextAnchor::kStart);
  add(mark.x - mark.radius - kGap, middle, TextAnchor::kEnd);
  add(mark.x, mark.y - mark.radius - kGap - 0.236 * font_size, TextAnchor::kMiddle);
  add(mark.x, mark.y + mark.radius + kGap + 0.928 * font_size, TextAnchor::kMiddle);
  // Further away, a line's height at a time, with a leader line back to the mark.
  const double step = 1.25 * font_size;
  for (int k = 1; k <= kLeaderSteps; ++k) {
    for (const double direction : {-1.0, 1.0}) {
      const double y = middle + direction * k * step;
      const double text_middle = y - 0.35 * font_size;
      for (const bool right : {true, false}) {
        const double x = right ? mark.x + mark.radius + 3 * kGap : mark.x - mark.radius - 3 * kGap;
        LabelPlacement* spot = add(x, y, right ? TextAnchor::kStart : TextAnchor::kEnd);
        spot->leader = true;
        // From the mark's edge towards the label's near end.
        const double dx = x - mark.x;
        const double dy = text_middle - mark.y;
        const double length = std::max(1e-9, std::hypot(dx, dy));
        spot->leader_x1 = mark.x + dx / length * mark.radius;
        spot->leader_y1 = mark.y + dy / length * mark.radius;
        spot->leader_x2 = x + (right ? -1 : 1);
        spot->leader_y2 = text_middle;
      }
    }
  }
  return spots;
}

}  // namespace

std::vector<LabelPlacement> PlaceLabels(const std::vector<ChartMark>& marks,
                                        const std::vector<std::string>& texts,
                                        const std::vector<size_t>& mark_of,
                                        const std::vector<Box>& obstacles, const Box& bounds,
                                        double font_size) {
  std::vector<Box> taken;
  for (const Box& obstacle : obstacles) taken.push_back(Padded(obstacle));
  std::vector<LabelPlacement> placements(texts.size());
  for (size_t i = 0; i < texts.size() && i < mark_of.size(); ++i) {
    const size_t own = mark_of[i];
    if (own >= marks.size()) continue;
    const LabelPlacement* free_spot = nullptr;
    const LabelPlacement* clear_spot = nullptr;
    const std::vector<LabelPlacement> spots = Candidates(marks[own], texts[i], font_size);
    for (const LabelPlacement& spot : spots) {
      if (!spot.box.Inside(bounds)) continue;
      bool overlaps = false;
      for (const Box& box : taken) overlaps = overlaps || spot.box.Overlaps(box);
      if (overlaps) continue;
      if (free_spot == nullptr) free_spot = &spot;
      bool covers_mark = false;
      for (size_t m = 0; m < marks.size() && !covers_mark; ++m) {
        covers_mark = spot.box.TouchesCircle(marks[m].x, marks[m].y, marks[m].radius);
      }
      if (!covers_mark) {
        clear_spot = &spot;
        break;
      }
    }
    const LabelPlacement* chosen = clear_spot != nullptr ? clear_spot : free_spot;
    if (chosen == nullptr) continue;
    placements[i] = *chosen;
    taken.push_back(Padded(chosen->box));
  }
  return placements;
}

}  // namespace fsdpd::client
