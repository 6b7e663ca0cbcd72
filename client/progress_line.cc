#include "client/progress_line.h"

#include <algorithm>
#include <cstdio>

#include "client/sparkline.h"
#include "client/terminal_width.h"

namespace fsdpd::client {
namespace {

constexpr size_t kBarMin = 10;
constexpr size_t kBarMax = 40;
constexpr size_t kSparkMin = 8;
constexpr size_t kSparkMax = 30;
constexpr char kSeparator[] = "  ";

// The fields in the order they are given up last: a field is shown only if every field before
// it is.
enum Field { kStep, kPercent, kEta, kLoss, kBar, kSpark, kRate, kTokens, kFields };

}  // namespace

void StepPace::Add(int64_t step, int64_t unix_millis, double step_seconds) {
  if (!window_.empty() && step <= window_.back().step) window_.clear();
  window_.push_back({step, unix_millis, step_seconds});
  if (window_.size() > kWindow) window_.pop_front();
}

double StepPace::SecondsPerStep() const {
  if (window_.empty()) return -1;
  double seconds_per_step = window_.back().step_seconds;
  const Sample& first = window_.front();
  const Sample& last = window_.back();
  if (last.step > first.step && last.unix_millis > first.unix_millis) {
    seconds_per_step = (last.unix_millis - first.unix_millis) / 1000.0 /
                       static_cast<double>(last.step - first.step);
  }
  return seconds_per_step > 0 ? seconds_per_step : -1;
}

double StepPace::SecondsLeft(int64_t total) const {
  const double seconds_per_step = SecondsPerStep();
  if (seconds_per_step <= 0 || total <= 0) return -1;
  return seconds_per_step * static_cast<double>(std::max<int64_t>(0, total - window_.back().step));
}

std::string FormatStepRate(double seconds_per_step) {
  if (!(seconds_per_step > 0)) return "";
  char buffer[32];
  if (seconds_per_step <= 1.0) {
    std::snprintf(buffer, sizeof(buffer), "%.3g steps/s", 1.0 / seconds_per_step);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3g s/step", seconds_per_step);
  }
  return buffer;
}

std::string ProgressBar(int64_t done, int64_t total, size_t cells) {
  static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const double fraction =
      total > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0) : 0;
  const auto eighths = static_cast<size_t>(fraction * static_cast<double>(cells) * 8);
  const size_t full = std::min(cells, eighths / 8);
  std::string bar = "|";
  for (size_t i = 0; i < full; ++i) bar += "█";
  size_t used = full;
  if (used < cells && eighths % 8 != 0) {
    bar += kEighths[eighths % 8];
    ++used;
  }
  bar.append(cells - used, ' ');
  return bar + "|";
}

std::string RenderProgressLine(const ProgressLineFields& fields, size_t columns) {
  const bool known_total = fields.total > 0;
  std::string texts[kFields];
  texts[kStep] = "step " + std::to_string(fields.step) +
                 (known_total ? "/" + std::to_string(fields.total) : "");
  if (known_total) {
    const int64_t percent =
        std::clamp<int64_t>(fields.step * 100 / fields.total, 0, 100);  // never 100 before the end
    char buffer[16];
    std::snprintf(buffer, sizeof(buffer), "%3lld%%", static_cast<long long>(percent));
    texts[kPercent] = buffer;
  }
  if (!fields.eta.empty()) texts[kEta] = "ETA " + fields.eta;
  if (!fields.loss.empty()) texts[kLoss] = "loss " + fields.loss;
  texts[kRate] = fields.rate;
  if (!fields.tokens_per_second.empty()) texts[kTokens] = fields.tokens_per_second + " tok/s";
  const size_t history = fields.loss_history.size();
  const size_t spark_max = std::min(kSparkMax, history);
  const size_t spark_min = std::min(kSparkMin, spark_max);
  const std::string range_text = FormatRange(RangeOf(fields.loss_history, spark_max));

  // Each field's least width (with its separator), and whether it has anything to show.
  size_t need[kFields] = {};
  bool present[kFields] = {};
  for (int field = 0; field < kFields; ++field) {
    present[field] = !texts[field].empty();
    need[field] = (field == kStep ? 0 : 2) + DisplayColumns(texts[field]);
  }
  present[kBar] = known_total;
  need[kBar] = 2 + 2 + kBarMin;
  present[kSpark] = !texts[kLoss].empty() && spark_max > 0 && !range_text.empty();
  need[kSpark] = 1 + spark_min + 1 + DisplayColumns(range_text);

  bool shown[kFields] = {};
  size_t used = 0;
  for (int field = 0; field < kFields; ++field) {
    if (!present[field]) continue;
    if (used + need[field] > columns) break;  // it and everything less important goes
    shown[field] = true;
    used += need[field];
  }
  if (!shown[kStep]) return FitColumns(texts[kStep], columns);

  // The room left goes to the bar and the sparkline, half each, then to whichever can take it.
  size_t room = columns - used;
  size_t bar_cells = kBarMin;
  size_t spark_steps = spark_min;
  if (shown[kBar] && shown[kSpark]) {
    const size_t to_spark = std::min(room / 2, spark_max - spark_min);
    spark_steps += to_spark;
    room -= to_spark;
  }
  if (shown[kBar]) {
    const size_t to_bar = std::min(room, kBarMax - kBarMin);
    bar_cells += to_bar;
    room -= to_bar;
  }
  if (shown[kSpark]) spark_steps += std::min(room, spark_max - spark_steps);

  auto assemble = [&]() {
    std::string line = texts[kStep];
    if (shown[kBar]) line += " " + ProgressBar(fields.step, fields.total, bar_cells) + " ";
    if (shown[kPercent]) line += (shown[kBar] ? "" : kSeparator) + texts[kPercent];
    if (shown[kRate]) line += kSeparator + texts[kRate];
    if (shown[kEta]) line += kSeparator + texts[kEta];
    if (shown[kLoss]) line += kSeparator + texts[kLoss];
    if (shown[kSpark]) {
      line += " " + Sparkline(fields.loss_history, spark_steps) + " " +
              FormatRange(RangeOf(fields.loss_history, spark_steps));
    }
    if (shown[kTokens]) line += kSeparator + texts[kTokens];
    return line;
  };
  // The range of fewer steps can print longer ("2.301" where all of them gave "2.3"): then the
  // sparkline draws fewer steps.
  std::string line = assemble();
  while (shown[kSpark] && DisplayColumns(line) > columns && spark_steps > 1) {
    spark_steps -= std::min(spark_steps - 1, DisplayColumns(line) - columns);
    line = assemble();
  }
  return FitColumns(line, columns);
}

}  // namespace fsdpd::client
