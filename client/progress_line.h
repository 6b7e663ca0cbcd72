// `fsdpctl watch`'s progress line on a terminal, redrawn in place each step and fitted to the
// terminal's width so that it never wraps:
//
//   step 120/300 |█████▍   |  40%  3.2 steps/s  ETA 56s  loss 2.3456 ▇▆▅▃▂▁ 2.30–2.46  9k tok/s
//
// Where it does not fit, whole fields are dropped, least important first: tokens/s, the step
// rate, the loss sparkline with its range, the bar, the loss, the ETA, the percentage. "step N/T"
// always stays (cut to the width if even it does not fit). The bar (10 to 40 cells) and the
// sparkline (8 to 30 steps, fewer while fewer are known) share the room that is left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace fsdpd::client {

// The pace of the last few reported steps: the step rate and the time left.
class StepPace {
 public:
  // A step at or before the last one (a restarted attempt resuming from a checkpoint) starts a
  // new window.
  void Add(int64_t step, int64_t unix_millis, double step_seconds);
  void Clear() { window_.clear(); }
  // Seconds a step over the window, by the reports' clock (else the last step's own time); -1
  // when unknown.
  double SecondsPerStep() const;
  // Seconds until step `total`; -1 when unknown.
  double SecondsLeft(int64_t total) const;

 private:
  static constexpr size_t kWindow = 20;
  struct Sample {
    int64_t step;
    int64_t unix_millis;
    double step_seconds;
  };
  std::deque<Sample> window_;
};

// What the line shows; texts already formatted (output.h), empty when unknown (left out).
struct ProgressLineFields {
  int64_t step = 0;
  int64_t total = 0;                 // <= 0: unknown, so no bar and no percentage
  std::string eta;                   // "56s"
  std::string rate;                  // "3.2 steps/s" (FormatStepRate)
  std::string loss;                  // "2.3456"
  std::vector<double> loss_history;  // oldest first, for the sparkline
  std::string tokens_per_second;     // "12.3k"
};

// "3.2 steps/s" at a step or more a second, "4.5 s/step" below; "" when unknown (<= 0).
std::string FormatStepRate(double seconds_per_step);

// The bar for done/total in `cells` columns between two '|': full blocks and one partial eighth.
std::string ProgressBar(int64_t done, int64_t total, size_t cells);

// The line in at most `columns` display columns (terminal_width.h), without a line end.
std::string RenderProgressLine(const ProgressLineFields& fields, size_t columns);

}  // namespace fsdpd::client
