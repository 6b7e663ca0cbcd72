#include "client/svg_text.h"

#include <algorithm>
#include <cmath>

namespace fsdpd::client {
namespace {

// DejaVu Sans advance widths in em for ' ' (0x20) to '~' (0x7e), read from its hmtx table.
constexpr double kAdvance[95] = {
    0.318, 0.401, 0.460, 0.838, 0.636, 0.950, 0.780, 0.275, 0.390, 0.390, 0.500, 0.838,
    0.318, 0.361, 0.318, 0.337, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636,
    0.636, 0.636, 0.337, 0.337, 0.838, 0.838, 0.838, 0.531, 1.000, 0.684, 0.686, 0.698,
    0.770, 0.632, 0.575, 0.775, 0.752, 0.295, 0.295, 0.656, 0.557, 0.863, 0.748, 0.787,
    0.603, 0.787, 0.695, 0.635, 0.611, 0.732, 0.684, 0.989, 0.685, 0.611, 0.685, 0.390,
    0.337, 0.390, 0.838, 0.500, 0.500, 0.613, 0.635, 0.550, 0.635, 0.615, 0.352, 0.635,
    0.634, 0.278, 0.278, 0.579, 0.278, 0.974, 0.634, 0.612, 0.635, 0.635, 0.411, 0.521,
    0.392, 0.634, 0.592, 0.818, 0.592, 0.592, 0.525, 0.636, 0.337, 0.636, 0.838};
// The same for DejaVu Sans Bold.
constexpr double kBoldAdvance[95] = {
    0.348, 0.456, 0.521, 0.838, 0.696, 1.002, 0.872, 0.306, 0.457, 0.457, 0.523, 0.838,
    0.380, 0.415, 0.380, 0.365, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696,
    0.696, 0.696, 0.400, 0.400, 0.838, 0.838, 0.838, 0.580, 1.000, 0.774, 0.762, 0.734,
    0.830, 0.683, 0.683, 0.821, 0.837, 0.372, 0.372, 0.775, 0.637, 0.995, 0.837, 0.850,
    0.733, 0.850, 0.770, 0.720, 0.682, 0.812, 0.774, 1.103, 0.771, 0.724, 0.725, 0.457,
    0.365, 0.457, 0.838, 0.500, 0.500, 0.675, 0.716, 0.593, 0.716, 0.678, 0.435, 0.716,
    0.712, 0.343, 0.343, 0.665, 0.343, 1.042, 0.712, 0.687, 0.716, 0.716, 0.493, 0.595,
    0.478, 0.712, 0.652, 0.924, 0.645, 0.652, 0.582, 0.712, 0.365, 0.712, 0.838};
// The font's ascent and descent (hhea), in em.
constexpr double kAscent = 0.928;
constexpr double kDescent = 0.236;

}  // namespace

bool Box::TouchesCircle(double x, double y, double radius) const {
  const double nearest_x = std::clamp(x, left, right);
  const double nearest_y = std::clamp(y, top, bottom);
  return std::hypot(x - nearest_x, y - nearest_y) < radius;
}

double TextWidth(std::string_view text, double font_size, bool bold) {
  const double* advance = bold ? kBoldAdvance : kAdvance;
  double em = 0;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      em += advance[byte - 0x20];
    } else if (byte >= 0xc0) {
      em += 1.0;  // the first byte of a multi-byte character; continuation bytes add nothing
    } else if (byte < 0x80) {
      em += advance[0];  // a control character is drawn as a space at most
    }
  }
  return em * font_size;
}

Box TextBox(std::string_view text, double x, double y, double font_size, TextAnchor anchor,
            bool bold) {
  const double width = TextWidth(text, font_size, bold);
  double left = x;
  if (anchor == TextAnchor::kMiddle) left = x - width / 2;
  if (anchor == TextAnchor::kEnd) left = x - width;
  return Box{left, y - kAscent * font_size, left + width, y + kDescent * font_size};
}

std::vector<std::string> WrapText(const std::string& text, double max_width, double font_size,
                                  bool bold) {
  std::vector<std::string> lines;
  std::string line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    const std::string joined = line.empty() ? word : line + " " + word;
    if (line.empty() || TextWidth(joined, font_size, bold) <= max_width) {
      line = joined;
    } else {
      lines.push_back(line);
      line = word;
    }
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

const char* AnchorName(TextAnchor anchor) {
  switch (anchor) {
    case TextAnchor::kStart:
      return "start";
    case TextAnchor::kMiddle:
      return "middle";
    case TextAnchor::kEnd:
      return "end";
  }
  return "start";
}

}  // namespace fsdpd::client
