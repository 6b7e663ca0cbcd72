#include "client/roofline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/label_placement.h"
#include "client/svg_text.h"

namespace fsdpd::client {
namespace {

// The verdicts of docs/profiling.md, with the colours ncu's chart readers expect.
struct VerdictStyle {
  const char* verdict;
  const char* colour;
  const char* legend;
};
constexpr VerdictStyle kStyles[] = {
    {"memory-bound", "#1f77b4", "memory-bound"},
    {"compute-bound", "#d62728", "compute-bound"},
    {"latency-or-mixed", "#ff7f0e", "latency-bound or mixed"},
    {"", "#7f7f7f", "no verdict"},
};

const VerdictStyle& StyleOf(const std::string& verdict) {
  for (const VerdictStyle& style : kStyles) {
    if (verdict == style.verdict) return style;
  }
  return kStyles[3];
}

std::string Escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string Number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f", value);
  return buffer;
}

// 1e12 → "1T", 2.5e9 → "2.5G" for axis ticks; with a unit, 2.5e9 "B/s" → "2.5 GB/s".
std::string Si(double value, const std::string& unit = "") {
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int index = 0;
  double scaled = value;
  while (std::fabs(scaled) >= 1000.0 && index < 6) {
    scaled /= 1000.0;
    ++index;
  }
  if (value != 0 && std::fabs(value) < 1.0) {
    char small[32];
    std::snprintf(small, sizeof(small), "%g", value);
    return unit.empty() ? small : std::string(small) + " " + unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3g%s%s", scaled, unit.empty() ? "" : " ",
                kPrefixes[index]);
  return buffer + unit;
}

std::string Seconds(double seconds) {
  char buffer[32];
  if (seconds >= 1.0) {
    std::snprintf(buffer, sizeof(buffer), "%.3f s", seconds);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3f ms", seconds * 1e3);
  }
  return buffer;
}

// A log10 axis over whole decades, mapped onto [from, to] pixels.
struct LogAxis {
  int low_decade;
  int high_decade;
  double from;
  double to;
  double Map(double value) const {
    const double t = (std::log10(value) - low_decade) / (high_decade - low_decade);
    return from + t * (to - from);
  }
  // The value drawn at pixel `at`.
  double Unmap(double at) const {
    return std::pow(10.0, low_decade + (at - from) / (to - from) * (high_decade - low_decade));
  }
};

// Writes one <text>; `attributes` go inside the tag as written (class, fill, font-weight).
void Text(std::ostringstream& svg, double x, double y, TextAnchor anchor, const std::string& text,
          const std::string& attributes = "") {
  svg << "<text x=\"" << Number(x) << "\" y=\"" << Number(y) << "\"";
  if (anchor != TextAnchor::kStart) svg << " text-anchor=\"" << AnchorName(anchor) << "\"";
  if (!attributes.empty()) svg << " " << attributes;
  svg << ">" << Escape(text) << "</text>\n";
}

// Every `step`-th decade of an axis is labelled, the smallest step whose labels keep apart.
int TickStep(const LogAxis& axis, bool horizontal, double font_size) {
  const int decades = axis.high_decade - axis.low_decade;
  const double spacing = std::fabs(axis.to - axis.from) / std::max(decades, 1);
  double widest = 0;
  for (int decade = axis.low_decade; decade <= axis.high_decade; ++decade) {
    widest = std::max(widest, TextWidth(Si(std::pow(10.0, decade)), font_size));
  }
  const double needed = (horizontal ? widest : 1.2 * font_size) + 6;
  return std::max(1, static_cast<int>(std::ceil(needed / spacing)));
}

// The legend's column on the right, and the smallest canvas the layout fits.
constexpr double kLegendWidth = 190;
constexpr int kMinWidth = 640;
constexpr int kMinHeight = 400;

struct Point {
  const v1::KernelStat* kernel;
  double intensity;  // FLOP per byte
  double flops_per_second;
};

}  // namespace

bool HasRooflinePoint(const v1::KernelStat& kernel) {
  return kernel.flops() > 0 && kernel.bytes() > 0 && kernel.total_seconds() > 0 &&
         std::isfinite(kernel.flops()) && std::isfinite(kernel.bytes()) &&
         std::isfinite(kernel.total_seconds());
}

absl::StatusOr<std::string> RenderRooflineSvg(const v1::ProfileReport& report,
                                              const RooflineOptions& options) {
  const double peak_flops = report.peak_flops_per_second();
  const double peak_bandwidth = report.peak_bytes_per_second();
  if (!(peak_flops > 0) || !(peak_bandwidth > 0) || !std::isfinite(peak_flops) ||
      !std::isfinite(peak_bandwidth)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the profile of rank ", report.rank(), " has no device peaks (peak_flops_per_second ",
        peak_flops, ", peak_bytes_per_second ", peak_bandwidth,
        "): its worker predates them or could not measure them, so there are no roofs to draw"));
  }
  if (options.width < kMinWidth || options.height < kMinHeight) {
    return absl::InvalidArgumentError(
        absl::StrCat("the chart needs at least ", kMinWidth, " × ", kMinHeight, " pixels"));
  }
  std::vector<Point> points;
  size_t left_out = 0;
  bool analytic = false;
  bool counters = false;
  for (const v1::KernelStat& kernel : report.kernels()) {
    if (!HasRooflinePoint(kernel)) {
      ++left_out;
      continue;
    }
    points.push_back(
        {&kernel, kernel.flops() / kernel.bytes(), kernel.flops() / kernel.total_seconds()});
    analytic = analytic || kernel.source() != "cupti";
    counters = counters || kernel.source() == "cupti";
  }
  if (points.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("none of the ", report.kernels_size(),
                     " kernels of the profile has a FLOP and byte count to place on the roofline"));
  }
  const double width = options.width;
  const double height = options.height;
  constexpr double kFont = 12;
  constexpr double kMargin = 16;

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << options.width << "\" height=\""
      << options.height << "\" viewBox=\"0 0 " << options.width << " " << options.height
      << "\" font-family=\"" << kSvgFontFamily << "\" font-size=\"" << kFont << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";

  // Header: the title and what the figures rest on, each wrapped to the canvas.
  double baseline = 24;
  for (const std::string& line :
       WrapText("Roofline" + (options.title.empty() ? "" : ": " + options.title),
                width - 2 * kMargin, 16)) {
    Text(svg, kMargin, baseline, TextAnchor::kStart, line, "class=\"title\" font-size=\"16\"");
    baseline += 20;
  }
  const std::string basis =
      analytic ? (counters ? "Analytic estimate for the kernels without hardware counters; "
                             "verdicts from CUPTI counters where read"
                           : absl::StrCat("Analytic estimate: FLOPs and bytes from each op's "
                                          "shapes, times from ",
                                          report.device() == "cpu"
                                              ? "host timers (no hardware counters)"
                                              : "the device's kernel activity (counters off)"))
               : "Verdicts from hardware counters (CUPTI); intensity from each op's FLOPs "
                 "and bytes";
  for (const std::string& line : WrapText(basis, width - 2 * kMargin, kFont)) {
    Text(svg, kMargin, baseline - 4, TextAnchor::kStart, line, "class=\"basis\" fill=\"#555\"");
    baseline += 16;
  }

  // The plot between the header, the axis labels and the legend's column on the right.
  const double legend_x = width - kMargin - kLegendWidth;
  const double left = 90, right = legend_x - 28, top = baseline + 12, bottom = height - 60;

  // Axes: whole decades around the marks and the ridge point (peak FLOP/s ÷ bandwidth).
  const double ridge = peak_flops / peak_bandwidth;
  double x_low = ridge, x_high = ridge, y_low = peak_flops, y_high = peak_flops;
  double longest = 0;
  for (const Point& point : points) {
    x_low = std::min(x_low, point.intensity);
    x_high = std::max(x_high, point.intensity);
    y_low = std::min(y_low, point.flops_per_second);
    y_high = std::max(y_high, point.flops_per_second);
    longest = std::max(longest, point.kernel->total_seconds());
  }
  const LogAxis x_axis{static_cast<int>(std::floor(std::log10(x_low))) - 1,
                       static_cast<int>(std::ceil(std::log10(x_high))) + 1, left, right};
  const LogAxis y_axis{static_cast<int>(std::floor(std::log10(y_low))) - 1,
                       static_cast<int>(std::ceil(std::log10(y_high))) + 1, bottom, top};

  // Grid and ticks, one line per decade; labels on every decade that leaves them apart.
  svg << "<g class=\"axes\" stroke=\"#ddd\">\n";
  const int x_step = TickStep(x_axis, true, kFont);
  for (int decade = x_axis.low_decade; decade <= x_axis.high_decade; ++decade) {
    const double x = x_axis.Map(std::pow(10.0, decade));
    svg << "<line x1=\"" << Number(x) << "\" y1=\"" << top << "\" x2=\"" << Number(x) << "\" y2=\""
        << bottom << "\"/>\n";
    if ((decade - x_axis.low_decade) % x_step == 0) {
      Text(svg, x, bottom + 20, TextAnchor::kMiddle, Si(std::pow(10.0, decade)),
           "stroke=\"none\" fill=\"#333\"");
    }
  }
  const int y_step = TickStep(y_axis, false, kFont);
  for (int decade = y_axis.low_decade; decade <= y_axis.high_decade; ++decade) {
    const double y = y_axis.Map(std::pow(10.0, decade));
    svg << "<line x1=\"" << left << "\" y1=\"" << Number(y) << "\" x2=\"" << right << "\" y2=\""
        << Number(y) << "\"/>\n";
    if ((decade - y_axis.low_decade) % y_step == 0) {
      Text(svg, left - 6, y + 4, TextAnchor::kEnd, Si(std::pow(10.0, decade)),
           "stroke=\"none\" fill=\"#333\"");
    }
  }
  svg << "</g>\n";
  svg << "<rect x=\"" << left << "\" y=\"" << Number(top) << "\" width=\"" << right - left
      << "\" height=\"" << Number(bottom - top) << "\" fill=\"none\" stroke=\"#333\"/>\n";
  Text(svg, (left + right) / 2, bottom + 44, TextAnchor::kMiddle,
       "Arithmetic intensity (FLOP/byte)");
  svg << "<text transform=\"translate(24," << Number((top + bottom) / 2)
      << ") rotate(-90)\" text-anchor=\"middle\">Achieved performance (FLOP/s)</text>\n";

  // The roofs: bandwidth × intensity up to the ridge, then the peak FLOP rate.
  const double x_first = std::pow(10.0, x_axis.low_decade);
  const double x_last = std::pow(10.0, x_axis.high_decade);
  const double y_floor = std::pow(10.0, y_axis.low_decade);
  const double memory_start = std::max(x_first, y_floor / peak_bandwidth);
  const double ridge_x = x_axis.Map(ridge);
  const double peak_y = y_axis.Map(peak_flops);
  svg << "<polyline class=\"roof memory-roof\" fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"2\" "
         "points=\""
      << Number(x_axis.Map(memory_start)) << ","
      << Number(y_axis.Map(peak_bandwidth * memory_start)) << " " << Number(ridge_x) << ","
      << Number(peak_y) << "\"/>\n";
  svg << "<polyline class=\"roof compute-roof\" fill=\"none\" stroke=\"#9467bd\" "
         "stroke-width=\"2\" points=\""
      << Number(ridge_x) << "," << Number(peak_y) << " " << Number(x_axis.Map(x_last)) << ","
      << Number(peak_y) << "\"/>\n";

  // Marks, largest first so small ones stay visible on top; area ∝ time.
  std::vector<const Point*> by_time;
  for (const Point& point : points) by_time.push_back(&point);
  std::stable_sort(by_time.begin(), by_time.end(), [](const Point* a, const Point* b) {
    return a->kernel->total_seconds() > b->kernel->total_seconds();
  });
  std::vector<ChartMark> marks;
  for (const Point* point : by_time) {
    marks.push_back({x_axis.Map(point->intensity), y_axis.Map(point->flops_per_second),
                     3.0 + 15.0 * std::sqrt(point->kernel->total_seconds() / longest)});
  }
  svg << "<g class=\"kernels\">\n";
  for (size_t i = 0; i < by_time.size(); ++i) {
    const Point* point = by_time[i];
    const v1::KernelStat& kernel = *point->kernel;
    const ChartMark& mark = marks[i];
    const VerdictStyle& style = StyleOf(kernel.verdict());
    svg << "<circle class=\"kernel\" data-kernel=\"" << Escape(kernel.name())
        << "\" data-verdict=\"" << Escape(kernel.verdict()) << "\" cx=\"" << Number(mark.x)
        << "\" cy=\"" << Number(mark.y) << "\" r=\"" << Number(mark.radius) << "\" fill=\""
        << style.colour << "\" fill-opacity=\"0.6\" stroke=\"" << style.colour << "\"><title>"
        << Escape(kernel.name())
        << (kernel.unit().empty() ? "" : " (" + Escape(kernel.unit()) + ")") << ": "
        << Seconds(kernel.total_seconds()) << ", " << Si(point->flops_per_second, "FLOP/s")
        << " at " << Number(point->intensity) << " FLOP/byte"
        << (kernel.verdict().empty() ? "" : ", " + Escape(kernel.verdict()))
        << "</title></circle>\n";
  }
  svg << "</g>\n";

  // Each roof's label beside its line, at the first spot inside the plot that covers no mark
  // (else the first inside it); the legend names both roofs in any case.
  const Box plot{left + 2, top + 2, right - 2, bottom - 2};
  std::vector<Box> roof_labels;
  auto place_roof_label = [&](const std::string& label, const std::vector<Box>& spots,
                              const char* colour) {
    const Box* chosen = nullptr;
    for (const Box& spot : spots) {
      bool usable = spot.Inside(plot);
      for (const Box& taken : roof_labels) usable = usable && !spot.Overlaps(taken);
      if (!usable) continue;
      bool covers_mark = false;
      for (const ChartMark& mark : marks) {
        covers_mark = covers_mark || spot.TouchesCircle(mark.x, mark.y, mark.radius);
      }
      if (chosen == nullptr || !covers_mark) chosen = &spot;
      if (!covers_mark) break;
    }
    if (chosen == nullptr) return;
    // The box's left edge and baseline (the box holds the font's descent below it).
    Text(svg, chosen->left, chosen->bottom - 0.236 * kFont, TextAnchor::kStart, label,
         std::string("class=\"roof-label\" fill=\"") + colour + "\"");
    roof_labels.push_back(*chosen);
  };
  // The compute roof's: above or below the flat line, at its right end or by the ridge.
  const std::string compute_label = "peak " + Si(peak_flops, "FLOP/s");
  const double compute_width = TextWidth(compute_label, kFont);
  std::vector<Box> compute_spots;
  for (const double end_x : {right - 4, ridge_x + 8 + compute_width}) {
    for (const double y : {peak_y - 6, peak_y + 6 + 0.928 * kFont}) {
      compute_spots.push_back(TextBox(compute_label, end_x, y, kFont, TextAnchor::kEnd));
    }
  }
  place_roof_label(compute_label, compute_spots, "#9467bd");
  // The memory roof's: above the rising line (the label's lower right corner clears the line
  // where the label ends), by the ridge or at the line's start; else below it by the ridge.
  const std::string memory_label = "memory " + Si(peak_bandwidth, "B/s");
  const double memory_width = TextWidth(memory_label, kFont);
  auto line_y = [&](double x) { return y_axis.Map(peak_bandwidth * x_axis.Unmap(x)); };
  std::vector<Box> memory_spots;
  for (const double end_x : {ridge_x - 8, x_axis.Map(memory_start) + 4 + memory_width}) {
    memory_spots.push_back(
        TextBox(memory_label, end_x, line_y(end_x) - 4 - 0.236 * kFont, kFont, TextAnchor::kEnd));
  }
  // Below: the label's upper left corner clears the line where the label starts.
  const double below_x = ridge_x + 8 - memory_width - 40;
  memory_spots.push_back(TextBox(memory_label, below_x, line_y(below_x) + 4 + 0.928 * kFont, kFont,
                                 TextAnchor::kStart));
  place_roof_label(memory_label, memory_spots, "#2ca02c");

  // The top kernels by time get their names, placed apart from each other and the roof labels.
  std::vector<std::string> names;
  std::vector<size_t> mark_of;
  for (size_t i = 0; i < by_time.size() && i < options.labelled_kernels; ++i) {
    std::string name = by_time[i]->kernel->name();
    if (name.size() > 40) name = name.substr(0, 37) + "...";
    // The same kernel runs in several units (layers.0, layers.1): the unit tells them apart.
    if (!by_time[i]->kernel->unit().empty()) name += " (" + by_time[i]->kernel->unit() + ")";
    names.push_back(name);
    mark_of.push_back(i);
  }
  const std::vector<LabelPlacement> placed =
      PlaceLabels(marks, names, mark_of, roof_labels, plot, kFont);
  size_t unlabelled = 0;
  svg << "<g class=\"labels\">\n";
  for (size_t i = 0; i < placed.size(); ++i) {
    const LabelPlacement& label = placed[i];
    if (!label.placed) {
      ++unlabelled;
      continue;
    }
    if (label.leader) {
      svg << "<line class=\"leader\" x1=\"" << Number(label.leader_x1) << "\" y1=\""
          << Number(label.leader_y1) << "\" x2=\"" << Number(label.leader_x2) << "\" y2=\""
          << Number(label.leader_y2) << "\" stroke=\"#888\"/>\n";
    }
    Text(svg, label.x, label.y, label.anchor, names[i], "class=\"label\"");
  }
  svg << "</g>\n";

  // Legend: verdict colours, the roofs, what the size means and what is not drawn, each line
  // wrapped to the legend's column.
  svg << "<g class=\"legend\">\n";
  double y = top + 4;
  Text(svg, legend_x, y, TextAnchor::kStart, "Verdict", "font-weight=\"bold\"");
  y += 20;
  for (const VerdictStyle& style : kStyles) {
    svg << "<circle cx=\"" << Number(legend_x + 6) << "\" cy=\"" << Number(y - 4)
        << "\" r=\"6\" fill=\"" << style.colour << "\" fill-opacity=\"0.6\" stroke=\""
        << style.colour << "\"/>\n";
    Text(svg, legend_x + 18, y, TextAnchor::kStart, style.legend);
    y += 20;
  }
  y += 6;
  auto paragraph = [&](const std::string& text, const std::string& attributes) {
    bool first = true;
    for (const std::string& line : WrapText(text, kLegendWidth, kFont)) {
      Text(svg, legend_x, y, TextAnchor::kStart, line, first ? attributes : "");
      first = false;
      y += 16;
    }
    y += 6;
  };
  paragraph("Roofs: peak " + Si(peak_flops, "FLOP/s") + "; memory " + Si(peak_bandwidth, "B/s"),
            "class=\"roofs\"");
  paragraph("Area: time (" + Seconds(longest) + " largest)", "class=\"area\"");
  paragraph(std::to_string(points.size()) + " kernel(s) drawn", "class=\"counts\"");
  if (left_out > 0) {
    paragraph(
        std::to_string(left_out) + " without a FLOP/byte cost (collectives, unknown ops) not drawn",
        "class=\"left-out\"");
  }
  if (unlabelled > 0) {
    paragraph(std::to_string(unlabelled) +
                  " label(s) left out for room; every mark's tooltip "
                  "names it",
              "class=\"unlabelled\"");
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace fsdpd::client
