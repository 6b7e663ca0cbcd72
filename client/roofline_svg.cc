#include "client/roofline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

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

// 1e12 → "1T", 2.5e9 → "2.5G": axis ticks and roof labels.
std::string Si(double value) {
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
    return small;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3g%s", scaled, kPrefixes[index]);
  return buffer;
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
};

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
  if (options.width < 320 || options.height < 240) {
    return absl::InvalidArgumentError("the chart needs at least 320 × 240 pixels");
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
  const double left = 90, right = options.width - 210.0, top = 70, bottom = options.height - 70.0;
  const LogAxis x_axis{static_cast<int>(std::floor(std::log10(x_low))) - 1,
                       static_cast<int>(std::ceil(std::log10(x_high))) + 1, left, right};
  const LogAxis y_axis{static_cast<int>(std::floor(std::log10(y_low))) - 1,
                       static_cast<int>(std::ceil(std::log10(y_high))) + 1, bottom, top};

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << options.width << "\" height=\""
      << options.height << "\" viewBox=\"0 0 " << options.width << " " << options.height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text class=\"title\" x=\"" << left << "\" y=\"24\" font-size=\"16\">Roofline"
      << (options.title.empty() ? "" : ": " + Escape(options.title)) << "</text>\n";
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
  svg << "<text class=\"basis\" x=\"" << left << "\" y=\"44\" fill=\"#555\">" << Escape(basis)
      << "</text>\n";

  // Grid and ticks, one per decade.
  svg << "<g class=\"axes\" stroke=\"#ddd\">\n";
  for (int decade = x_axis.low_decade; decade <= x_axis.high_decade; ++decade) {
    const double x = x_axis.Map(std::pow(10.0, decade));
    svg << "<line x1=\"" << Number(x) << "\" y1=\"" << top << "\" x2=\"" << Number(x) << "\" y2=\""
        << bottom << "\"/>\n"
        << "<text x=\"" << Number(x) << "\" y=\"" << bottom + 16
        << "\" text-anchor=\"middle\" stroke=\"none\" fill=\"#333\">" << Si(std::pow(10.0, decade))
        << "</text>\n";
  }
  for (int decade = y_axis.low_decade; decade <= y_axis.high_decade; ++decade) {
    const double y = y_axis.Map(std::pow(10.0, decade));
    svg << "<line x1=\"" << left << "\" y1=\"" << Number(y) << "\" x2=\"" << right << "\" y2=\""
        << Number(y) << "\"/>\n"
        << "<text x=\"" << left - 6 << "\" y=\"" << Number(y + 4)
        << "\" text-anchor=\"end\" stroke=\"none\" fill=\"#333\">" << Si(std::pow(10.0, decade))
        << "</text>\n";
  }
  svg << "</g>\n";
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << right - left << "\" height=\""
      << bottom - top << "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg << "<text x=\"" << (left + right) / 2 << "\" y=\"" << bottom + 40
      << "\" text-anchor=\"middle\">Arithmetic intensity (FLOP/byte)</text>\n";
  svg << "<text transform=\"translate(24," << (top + bottom) / 2
      << ") rotate(-90)\" text-anchor=\"middle\">Achieved performance (FLOP/s)</text>\n";

  // The roofs: bandwidth × intensity up to the ridge, then the peak FLOP rate.
  const double x_first = std::pow(10.0, x_axis.low_decade);
  const double x_last = std::pow(10.0, x_axis.high_decade);
  const double y_floor = std::pow(10.0, y_axis.low_decade);
  const double memory_start = std::max(x_first, y_floor / peak_bandwidth);
  svg << "<polyline class=\"roof memory-roof\" fill=\"none\" stroke=\"#2ca02c\" stroke-width=\"2\" "
         "points=\""
      << Number(x_axis.Map(memory_start)) << ","
      << Number(y_axis.Map(peak_bandwidth * memory_start)) << " " << Number(x_axis.Map(ridge))
      << "," << Number(y_axis.Map(peak_flops)) << "\"/>\n";
  svg << "<polyline class=\"roof compute-roof\" fill=\"none\" stroke=\"#9467bd\" "
         "stroke-width=\"2\" points=\""
      << Number(x_axis.Map(ridge)) << "," << Number(y_axis.Map(peak_flops)) << " "
      << Number(x_axis.Map(x_last)) << "," << Number(y_axis.Map(peak_flops)) << "\"/>\n";
  svg << "<text x=\"" << Number(x_axis.Map(x_last) - 4) << "\" y=\""
      << Number(y_axis.Map(peak_flops) - 6) << "\" text-anchor=\"end\" fill=\"#9467bd\">peak "
      << Si(peak_flops) << "FLOP/s</text>\n";
  svg << "<text x=\"" << Number(x_axis.Map(memory_start) + 4) << "\" y=\""
      << Number(y_axis.Map(peak_bandwidth * memory_start) - 6) << "\" fill=\"#2ca02c\">"
      << Si(peak_bandwidth) << "B/s</text>\n";

  // Marks, largest first so small ones stay visible on top; area ∝ time.
  std::vector<const Point*> by_time;
  for (const Point& point : points) by_time.push_back(&point);
  std::stable_sort(by_time.begin(), by_time.end(), [](const Point* a, const Point* b) {
    return a->kernel->total_seconds() > b->kernel->total_seconds();
  });
  svg << "<g class=\"kernels\">\n";
  for (const Point* point : by_time) {
    const v1::KernelStat& kernel = *point->kernel;
    const double radius = 3.0 + 15.0 * std::sqrt(kernel.total_seconds() / longest);
    const VerdictStyle& style = StyleOf(kernel.verdict());
    svg << "<circle class=\"kernel\" data-kernel=\"" << Escape(kernel.name())
        << "\" data-verdict=\"" << Escape(kernel.verdict()) << "\" cx=\""
        << Number(x_axis.Map(point->intensity)) << "\" cy=\""
        << Number(y_axis.Map(point->flops_per_second)) << "\" r=\"" << Number(radius)
        << "\" fill=\"" << style.colour << "\" fill-opacity=\"0.6\" stroke=\"" << style.colour
        << "\"><title>" << Escape(kernel.name())
        << (kernel.unit().empty() ? "" : " (" + Escape(kernel.unit()) + ")") << ": "
        << Seconds(kernel.total_seconds()) << ", " << Si(point->flops_per_second) << "FLOP/s at "
        << Number(point->intensity) << " FLOP/byte"
        << (kernel.verdict().empty() ? "" : ", " + Escape(kernel.verdict()))
        << "</title></circle>\n";
  }
  svg << "</g>\n<g class=\"labels\">\n";
  for (size_t i = 0; i < by_time.size() && i < options.labelled_kernels; ++i) {
    const Point& point = *by_time[i];
    const double radius = 3.0 + 15.0 * std::sqrt(point.kernel->total_seconds() / longest);
    std::string name = point.kernel->name();
    if (name.size() > 40) name = name.substr(0, 37) + "...";
    // The same kernel runs in several units (layers.0, layers.1): the unit tells them apart.
    if (!point.kernel->unit().empty()) name += " (" + point.kernel->unit() + ")";
    svg << "<text class=\"label\" x=\"" << Number(x_axis.Map(point.intensity) + radius + 3)
        << "\" y=\"" << Number(y_axis.Map(point.flops_per_second) + 4) << "\">" << Escape(name)
        << "</text>\n";
  }
  svg << "</g>\n";

  // Legend: verdict colours, and what the size means.
  const double legend_x = right + 20;
  svg << "<g class=\"legend\">\n<text x=\"" << legend_x << "\" y=\"" << top + 4
      << "\" font-weight=\"bold\">Verdict</text>\n";
  double y = top + 24;
  for (const VerdictStyle& style : kStyles) {
    svg << "<circle cx=\"" << legend_x + 6 << "\" cy=\"" << y - 4 << "\" r=\"6\" fill=\""
        << style.colour << "\" fill-opacity=\"0.6\" stroke=\"" << style.colour << "\"/>\n"
        << "<text x=\"" << legend_x + 18 << "\" y=\"" << y << "\">" << style.legend << "</text>\n";
    y += 20;
  }
  svg << "<text x=\"" << legend_x << "\" y=\"" << y + 10 << "\">Area: time (" << Seconds(longest)
      << " largest)</text>\n";
  svg << "<text class=\"counts\" x=\"" << legend_x << "\" y=\"" << y + 30 << "\">" << points.size()
      << " kernel(s) drawn</text>\n";
  if (left_out > 0) {
    svg << "<text class=\"left-out\" x=\"" << legend_x << "\" y=\"" << y + 48 << "\">" << left_out
        << " without a FLOP/byte cost</text>\n"
        << "<text x=\"" << legend_x << "\" y=\"" << y + 64
        << "\">(collectives, unknown ops) not drawn</text>\n";
  }
  svg << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace fsdpd::client
