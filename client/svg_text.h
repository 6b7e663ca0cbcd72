// Where text lands in the SVG charts fsdpctl draws, without a renderer: each character's advance
// width in DejaVu Sans, the font the charts ask for first (kSvgFontFamily). The usual fallbacks
// (Arial, Helvetica, Liberation Sans) are narrower, so a box computed here holds the text in any
// of them. Characters outside ASCII count as one em, wider than any of them. Boxes let a chart
// keep labels apart and inside the canvas.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fsdpd::client {

inline constexpr char kSvgFontFamily[] = "DejaVu Sans, Bitstream Vera Sans, sans-serif";

// An axis-aligned box in SVG user units; y grows downwards.
struct Box {
  double left = 0;
  double top = 0;
  double right = 0;
  double bottom = 0;

  // Whether the two share any area (touching edges do not).
  bool Overlaps(const Box& other) const {
    return left < other.right && other.left < right && top < other.bottom && other.top < bottom;
  }
  bool Inside(const Box& outer) const {
    return left >= outer.left && right <= outer.right && top >= outer.top && bottom <= outer.bottom;
  }
  // Whether a circle reaches into the box.
  bool TouchesCircle(double x, double y, double radius) const;
};

enum class TextAnchor { kStart, kMiddle, kEnd };

// The advance width of `text` (UTF-8) at `font_size`, in DejaVu Sans or DejaVu Sans Bold.
double TextWidth(std::string_view text, double font_size, bool bold = false);

// The box of `text` drawn with its baseline at y and its anchor at x: from the font's ascent
// above the baseline to its descent below.
Box TextBox(std::string_view text, double x, double y, double font_size, TextAnchor anchor,
            bool bold = false);

// `text` broken at spaces into lines no wider than max_width; a word wider than that is a line
// of its own. Empty text gives no lines.
std::vector<std::string> WrapText(const std::string& text, double max_width, double font_size,
                                  bool bold = false);

// The SVG text-anchor attribute value.
const char* AnchorName(TextAnchor anchor);

}  // namespace fsdpd::client
