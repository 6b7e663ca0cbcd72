// fsdpctl's pictures: the roofline SVG parses as XML and holds one mark per kernel of the table
// that has a cost, at the position its FLOPs, bytes and time give, under roofs drawn from the
// report's peaks; the loss sparkline scales a series onto eight block heights.
#include <expat.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "client/label_placement.h"
#include "client/roofline_svg.h"
#include "client/sparkline.h"
#include "client/svg_text.h"

namespace fsdpd::client {
namespace {

using ::testing::HasSubstr;

// An element of the parsed SVG: its name, attributes and the text directly inside it.
struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::string text;
  std::string parent;
};

struct ParsedSvg {
  bool ok = false;
  std::string error;
  std::vector<Element> elements;
  std::vector<size_t> open;  // the stack while parsing
};

ParsedSvg ParseXml(const std::string& text) {
  ParsedSvg parsed;
  XML_Parser parser = XML_ParserCreate("UTF-8");
  XML_SetUserData(parser, &parsed);
  XML_SetElementHandler(
      parser,
      [](void* data, const XML_Char* name, const XML_Char** attributes) {
        auto* svg = static_cast<ParsedSvg*>(data);
        Element element;
        element.name = name;
        element.parent = svg->open.empty() ? "" : svg->elements[svg->open.back()].name;
        for (int i = 0; attributes[i] != nullptr; i += 2) {
          element.attributes[attributes[i]] = attributes[i + 1];
        }
        svg->elements.push_back(element);
        svg->open.push_back(svg->elements.size() - 1);
      },
      [](void* data, const XML_Char*) { static_cast<ParsedSvg*>(data)->open.pop_back(); });
  XML_SetCharacterDataHandler(parser, [](void* data, const XML_Char* text, int length) {
    auto* svg = static_cast<ParsedSvg*>(data);
    if (!svg->open.empty()) svg->elements[svg->open.back()].text.append(text, length);
  });
  parsed.ok = XML_Parse(parser, text.data(), static_cast<int>(text.size()), 1) == XML_STATUS_OK;
  if (!parsed.ok) parsed.error = XML_ErrorString(XML_GetErrorCode(parser));
  XML_ParserFree(parser);
  return parsed;
}

std::vector<Element> WithClass(const ParsedSvg& svg, const std::string& element,
                               const std::string& css_class) {
  std::vector<Element> found;
  for (const Element& e : svg.elements) {
    auto it = e.attributes.find("class");
    if (e.name == element && it != e.attributes.end() &&
        (" " + it->second + " ").find(" " + css_class + " ") != std::string::npos) {
      found.push_back(e);
    }
  }
  return found;
}

v1::KernelStat* AddKernel(v1::ProfileReport& report, const std::string& name, double seconds,
                          double flops, double bytes, const std::string& verdict,
                          const std::string& source = "analytic-estimate") {
  v1::KernelStat* kernel = report.add_kernels();
  kernel->set_name(name);
  kernel->set_total_seconds(seconds);
  kernel->set_flops(flops);
  kernel->set_bytes(bytes);
  kernel->set_verdict(verdict);
  kernel->set_source(source);
  return kernel;
}

// A CPU window: 100 GFLOP/s and 20 GB/s peaks, kernels on both sides of the ridge (5 FLOP/B),
// one name with characters XML must escape, and a collective without a cost.
v1::ProfileReport CpuWindow() {
  v1::ProfileReport report;
  report.set_rank(0);
  report.set_device("cpu");
  report.set_start_step(5);
  report.set_steps(3);
  report.set_peak_flops_per_second(100e9);
  report.set_peak_bytes_per_second(20e9);
  AddKernel(report, "matmul<float, 64>", 0.5, 40e9, 0.2e9, "compute-bound");  // 200 FLOP/B
  AddKernel(report, "rmsnorm", 0.2, 0.2e9, 3.2e9, "memory-bound");            // 1/16 FLOP/B
  AddKernel(report, "softmax & mask", 0.05, 0.1e9, 0.1e9, "latency-or-mixed");
  AddKernel(report, "adamw", 0.01, 0.02e9, 0.16e9, "memory-bound");
  AddKernel(report, "AllGather", 0.3, -1, -1, "", "host-timer");
  return report;
}

TEST(RooflineSvgTest, ParsesAndHasOneMarkPerKernelWithACost) {
  const v1::ProfileReport report = CpuWindow();
  RooflineOptions options;
  options.title = "job-1 rank 0 on cpu";
  options.labelled_kernels = 2;
  absl::StatusOr<std::string> svg = RenderRooflineSvg(report, options);
  ASSERT_TRUE(svg.ok()) << svg.status();
  const ParsedSvg parsed = ParseXml(*svg);
  ASSERT_TRUE(parsed.ok) << parsed.error << "\n" << *svg;
  EXPECT_EQ(parsed.elements.front().name, "svg");

  int with_cost = 0;
  for (const v1::KernelStat& kernel : report.kernels()) with_cost += HasRooflinePoint(kernel);
  const std::vector<Element> marks = WithClass(parsed, "circle", "kernel");
  ASSERT_EQ(marks.size(), static_cast<size_t>(with_cost));
  std::map<std::string, Element> by_name;
  for (const Element& mark : marks) by_name[mark.attributes.at("data-kernel")] = mark;
  for (const v1::KernelStat& kernel : report.kernels()) {
    EXPECT_EQ(by_name.count(kernel.name()), HasRooflinePoint(kernel) ? 1u : 0u) << kernel.name();
  }
  // The escaped names come back as they were.
  EXPECT_EQ(by_name.count("matmul<float, 64>"), 1u);
  EXPECT_EQ(by_name.count("softmax & mask"), 1u);
  // Colour by verdict, size by time.
  EXPECT_NE(by_name["matmul<float, 64>"].attributes["fill"], by_name["rmsnorm"].attributes["fill"]);
  EXPECT_EQ(by_name["rmsnorm"].attributes["fill"], by_name["adamw"].attributes["fill"]);
  EXPECT_GT(std::stod(by_name["matmul<float, 64>"].attributes["r"]),
            std::stod(by_name["rmsnorm"].attributes["r"]));
  EXPECT_GT(std::stod(by_name["rmsnorm"].attributes["r"]),
            std::stod(by_name["adamw"].attributes["r"]));
  // Log axes: higher intensity is further right, higher FLOP/s further up (smaller y).
  EXPECT_GT(std::stod(by_name["matmul<float, 64>"].attributes["cx"]),
            std::stod(by_name["rmsnorm"].attributes["cx"]));
  EXPECT_LT(std::stod(by_name["matmul<float, 64>"].attributes["cy"]),
            std::stod(by_name["rmsnorm"].attributes["cy"]));

  // Both roofs, meeting at the ridge: the memory roof ends where the compute roof starts.
  const std::vector<Element> memory = WithClass(parsed, "polyline", "memory-roof");
  const std::vector<Element> compute = WithClass(parsed, "polyline", "compute-roof");
  ASSERT_EQ(memory.size(), 1u);
  ASSERT_EQ(compute.size(), 1u);
  const std::string memory_points = memory[0].attributes.at("points");
  const std::string compute_points = compute[0].attributes.at("points");
  EXPECT_EQ(memory_points.substr(memory_points.rfind(' ') + 1),
            compute_points.substr(0, compute_points.find(' ')));
  // The compute roof is flat and above every mark.
  const double roof_y = std::stod(compute_points.substr(compute_points.find(',') + 1));
  for (const Element& mark : marks) EXPECT_LT(roof_y, std::stod(mark.attributes.at("cy")));

  // The two longest kernels are labelled, by name.
  const std::vector<Element> labels = WithClass(parsed, "text", "label");
  ASSERT_EQ(labels.size(), 2u);
  EXPECT_EQ(labels[0].text, "matmul<float, 64>");
  EXPECT_EQ(labels[1].text, "rmsnorm");
  // Labelled as an estimate on CPU, and the collective is counted as left out.
  ASSERT_EQ(WithClass(parsed, "text", "basis").size(), 1u);
  EXPECT_THAT(WithClass(parsed, "text", "basis")[0].text, HasSubstr("Analytic estimate"));
  EXPECT_THAT(WithClass(parsed, "text", "basis")[0].text, HasSubstr("host timers"));
  ASSERT_EQ(WithClass(parsed, "text", "left-out").size(), 1u);
  EXPECT_THAT(WithClass(parsed, "text", "left-out")[0].text, HasSubstr("1 without"));
  EXPECT_THAT(WithClass(parsed, "text", "title")[0].text, HasSubstr("job-1 rank 0 on cpu"));
}

TEST(RooflineSvgTest, MarksSitWhereIntensityAndRateSayOnTheLogAxes) {
  // Two kernels one decade apart in both intensity and rate are one decade apart on screen,
  // whichever decade they are in.
  v1::ProfileReport report = CpuWindow();
  report.clear_kernels();
  AddKernel(report, "a", 1.0, 1e9, 1e9, "");   // 1 FLOP/B, 1 GFLOP/s
  AddKernel(report, "b", 1.0, 1e10, 1e9, "");  // 10 FLOP/B, 10 GFLOP/s
  AddKernel(report, "c", 1.0, 1e11, 1e9, "");  // 100 FLOP/B, 100 GFLOP/s
  absl::StatusOr<std::string> svg = RenderRooflineSvg(report, {});
  ASSERT_TRUE(svg.ok()) << svg.status();
  const ParsedSvg parsed = ParseXml(*svg);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  std::map<std::string, std::pair<double, double>> at;
  for (const Element& mark : WithClass(parsed, "circle", "kernel")) {
    at[mark.attributes.at("data-kernel")] = {std::stod(mark.attributes.at("cx")),
                                             std::stod(mark.attributes.at("cy"))};
  }
  ASSERT_EQ(at.size(), 3u);
  EXPECT_NEAR(at["b"].first - at["a"].first, at["c"].first - at["b"].first, 0.02);
  EXPECT_NEAR(at["b"].second - at["a"].second, at["c"].second - at["b"].second, 0.02);
  EXPECT_GT(at["b"].first - at["a"].first, 0);
}

TEST(RooflineSvgTest, CounterWindowsAreNotLabelledAsAnEstimate) {
  v1::ProfileReport report = CpuWindow();
  for (v1::KernelStat& kernel : *report.mutable_kernels()) kernel.set_source("cupti");
  absl::StatusOr<std::string> svg = RenderRooflineSvg(report, {});
  ASSERT_TRUE(svg.ok()) << svg.status();
  const ParsedSvg parsed = ParseXml(*svg);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  EXPECT_THAT(WithClass(parsed, "text", "basis")[0].text, HasSubstr("CUPTI"));
  EXPECT_THAT(WithClass(parsed, "text", "basis")[0].text, ::testing::Not(HasSubstr("estimate")));
}

// A GPU window without counters (the default) is an estimate of position and verdict, but its
// times are the device's kernel activity, not host timers (seen on the H200).
TEST(RooflineSvgTest, GpuWindowsWithoutCountersNameTheDeviceTimes) {
  v1::ProfileReport report = CpuWindow();
  report.set_device("cuda:0");
  absl::StatusOr<std::string> svg = RenderRooflineSvg(report, {});
  ASSERT_TRUE(svg.ok()) << svg.status();
  const ParsedSvg parsed = ParseXml(*svg);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  EXPECT_THAT(WithClass(parsed, "text", "basis")[0].text, HasSubstr("kernel activity"));
  EXPECT_THAT(WithClass(parsed, "text", "basis")[0].text, ::testing::Not(HasSubstr("host timers")));
}

TEST(RooflineSvgTest, NoPeaksOrNoCostIsAClearError) {
  v1::ProfileReport report = CpuWindow();
  report.set_peak_bytes_per_second(0);
  absl::StatusOr<std::string> svg = RenderRooflineSvg(report, {});
  EXPECT_EQ(svg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(svg.status().message()), HasSubstr("peak_bytes_per_second"));

  report = CpuWindow();
  for (v1::KernelStat& kernel : *report.mutable_kernels()) kernel.set_flops(-1);
  svg = RenderRooflineSvg(report, {});
  EXPECT_EQ(svg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(svg.status().message()), HasSubstr("none of the 5 kernels"));
}

// The boxes of every horizontal <text> of a chart, by the font metrics the chart is laid out with
// (tests/integration/pictures.cmake checks the same with a real renderer).
std::vector<std::pair<std::string, Box>> TextBoxes(const ParsedSvg& svg) {
  std::vector<std::pair<std::string, Box>> boxes;
  for (const Element& e : svg.elements) {
    if (e.name != "text" || e.attributes.count("transform") > 0) continue;
    const auto attribute = [&](const std::string& name, const std::string& otherwise) {
      auto it = e.attributes.find(name);
      return it == e.attributes.end() ? otherwise : it->second;
    };
    const std::string anchor = attribute("text-anchor", "start");
    boxes.push_back(
        {e.text, TextBox(e.text, std::stod(attribute("x", "0")), std::stod(attribute("y", "0")),
                         std::stod(attribute("font-size", "12")),
                         anchor == "end"      ? TextAnchor::kEnd
                         : anchor == "middle" ? TextAnchor::kMiddle
                                              : TextAnchor::kStart,
                         attribute("font-weight", "") == "bold")});
  }
  return boxes;
}

// No two texts overlap and all lie inside the canvas.
void ExpectReadableLayout(const std::string& svg, double width, double height) {
  const ParsedSvg parsed = ParseXml(svg);
  ASSERT_TRUE(parsed.ok) << parsed.error;
  const std::vector<std::pair<std::string, Box>> boxes = TextBoxes(parsed);
  const Box canvas{0, 0, width, height};
  for (size_t i = 0; i < boxes.size(); ++i) {
    EXPECT_TRUE(boxes[i].second.Inside(canvas))
        << "'" << boxes[i].first << "' leaves the canvas: " << boxes[i].second.left << ","
        << boxes[i].second.top << ".." << boxes[i].second.right << "," << boxes[i].second.bottom;
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      EXPECT_FALSE(boxes[i].second.Overlaps(boxes[j].second))
          << "'" << boxes[i].first << "' overlaps '" << boxes[j].first << "'";
    }
  }
}

// Kernels of nearly the same intensity and rate, as a model's repeated layers give: the labels
// move apart (or are left out and counted), the legend stays on the canvas.
TEST(RooflineSvgTest, CrowdedLabelsKeepApartAndInsideTheCanvas) {
  v1::ProfileReport report = CpuWindow();
  for (int i = 0; i < 12; ++i) {
    v1::KernelStat* kernel = AddKernel(report, "linear_backward_with_a_long_name", 0.4 - 0.01 * i,
                                       (40 + i) * 1e9, 1e9, "latency-or-mixed");
    kernel->set_unit("layers." + std::to_string(i));
  }
  RooflineOptions options;
  options.labelled_kernels = 12;
  absl::StatusOr<std::string> svg = RenderRooflineSvg(report, options);
  ASSERT_TRUE(svg.ok()) << svg.status();
  ExpectReadableLayout(*svg, options.width, options.height);
  // Whatever could not be placed is counted.
  const ParsedSvg parsed = ParseXml(*svg);
  const size_t labels = WithClass(parsed, "text", "label").size();
  EXPECT_GE(labels, 5u);
  if (labels < options.labelled_kernels) {
    ASSERT_EQ(WithClass(parsed, "text", "unlabelled").size(), 1u);
    EXPECT_THAT(WithClass(parsed, "text", "unlabelled")[0].text,
                HasSubstr(std::to_string(options.labelled_kernels - labels) + " label(s)"));
  }

  // A long title and the smallest canvas wrap rather than run off the edge.
  options.width = 640;
  options.height = 400;
  options.title = "job-000001 rank 0 on cpu, steps 5..7, with a title far too long for one line";
  svg = RenderRooflineSvg(report, options);
  ASSERT_TRUE(svg.ok()) << svg.status();
  ExpectReadableLayout(*svg, options.width, options.height);
  options.width = 639;
  EXPECT_EQ(RenderRooflineSvg(report, options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RooflineSvgTest, TheDefaultChartOfACpuWindowIsReadable) {
  RooflineOptions options;
  options.title = "job-1 rank 0 on cpu, steps 5..7";
  absl::StatusOr<std::string> svg = RenderRooflineSvg(CpuWindow(), options);
  ASSERT_TRUE(svg.ok()) << svg.status();
  ExpectReadableLayout(*svg, options.width, options.height);
}

TEST(SvgTextTest, WidthsFollowTheFontAndWrappingKeepsLinesNarrow) {
  EXPECT_NEAR(TextWidth("0123456789", 10), 63.6, 0.01);  // DejaVu Sans digits: 0.636 em
  EXPECT_GT(TextWidth("mmmm", 12), TextWidth("iiii", 12) * 3);
  EXPECT_GT(TextWidth("Verdict", 12, true), TextWidth("Verdict", 12));
  EXPECT_DOUBLE_EQ(TextWidth("×", 10), 10.0);  // one em for a character outside ASCII
  const Box box = TextBox("abc", 100, 50, 10, TextAnchor::kEnd);
  EXPECT_DOUBLE_EQ(box.right, 100);
  EXPECT_LT(box.top, 50 - 9);
  EXPECT_GT(box.bottom, 50 + 2);
  for (const std::string& line : WrapText("18 without a FLOP/byte cost (collectives, unknown ops)"
                                          " not drawn",
                                          100, 12)) {
    EXPECT_LE(TextWidth(line, 12), 100) << line;
  }
  EXPECT_EQ(WrapText("", 100, 12).size(), 0u);
  EXPECT_EQ(WrapText("unbreakable_word_wider_than_the_column", 50, 12).size(), 1u);
}

TEST(LabelPlacementTest, LabelsThatCannotFitAreLeftOut) {
  // Three marks in a box with room for one label beside them.
  const std::vector<ChartMark> marks = {{50, 50, 5}, {52, 50, 5}, {54, 50, 5}};
  const Box bounds{0, 35, 200, 65};
  const std::vector<LabelPlacement> placed =
      PlaceLabels(marks, {"first", "second", "third"}, {0, 1, 2}, {}, bounds, 12);
  ASSERT_EQ(placed.size(), 3u);
  EXPECT_TRUE(placed[0].placed);
  size_t count = 0;
  for (const LabelPlacement& label : placed) {
    if (!label.placed) continue;
    ++count;
    EXPECT_TRUE(label.box.Inside(bounds));
    for (const LabelPlacement& other : placed) {
      if (&other != &label && other.placed) EXPECT_FALSE(label.box.Overlaps(other.box));
    }
  }
  EXPECT_LT(count, 3u);
  // An obstacle is never covered.
  const Box obstacle{55, 30, 200, 70};
  const std::vector<LabelPlacement> beside =
      PlaceLabels({{100, 100, 5}}, {"name"}, {0}, {obstacle}, Box{0, 0, 300, 300}, 12);
  ASSERT_TRUE(beside[0].placed);
  EXPECT_FALSE(beside[0].box.Overlaps(obstacle));
}

TEST(SparklineTest, ScalesTheSeriesFromLowestToHighestBlock) {
  EXPECT_EQ(Sparkline({4.0, 3.0, 2.0, 1.0}, 10), "█▆▃▁");
  EXPECT_EQ(Sparkline({0, 7}, 10), "▁█");
  EXPECT_EQ(Sparkline({0, 1, 2, 3, 4, 5, 6, 7}, 8), "▁▂▃▄▅▆▇█");
}

TEST(SparklineTest, KeepsTheLastWidthValues) {
  // Only the last three are drawn and scaled among themselves.
  EXPECT_EQ(Sparkline({100.0, 1.0, 2.0, 3.0}, 3), "▁▅█");
}

TEST(SparklineTest, FlatEmptyAndNonFiniteSeries) {
  EXPECT_EQ(Sparkline({2.5, 2.5, 2.5}, 8), "▄▄▄");
  EXPECT_EQ(Sparkline({}, 8), "");
  EXPECT_EQ(Sparkline({1.0, 2.0}, 0), "");
  EXPECT_EQ(Sparkline({1.0, NAN, 2.0, INFINITY}, 8), "▁ █ ");
}

TEST(SparklineTest, SeriesKeepsItsCapacity) {
  SparklineSeries series(4);
  for (double loss : {9.0, 8.0, 4.0, 3.0, 2.0, 1.0}) series.Add(loss);
  EXPECT_EQ(series.Render(), "█▆▃▁");
  series.Clear();
  EXPECT_EQ(series.Render(), "");
}

}  // namespace
}  // namespace fsdpd::client
