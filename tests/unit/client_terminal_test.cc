// What `fsdpctl watch` draws on a terminal: the progress line fits the width it is given by
// dropping whole fields in the stated order (never wrapping), its bar and percentage follow the
// steps, the loss sparkline does not blow noise up to full height and prints the range it spans,
// and the terminal's width comes from the tty, else $COLUMNS, else 80.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "client/progress_line.h"
#include "client/sparkline.h"
#include "client/terminal_width.h"

namespace fsdpd::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<double> Losses(size_t count, double start, double step) {
  std::vector<double> losses;
  for (size_t i = 0; i < count; ++i) losses.push_back(start + step * static_cast<double>(i));
  return losses;
}

ProgressLineFields Running() {
  ProgressLineFields fields;
  fields.step = 120;
  fields.total = 300;
  fields.eta = "56s";
  fields.rate = FormatStepRate(0.31);
  fields.loss = "2.3456";
  fields.loss_history = Losses(40, 3.0, -0.02);
  fields.tokens_per_second = "12.3k";
  return fields;
}

TEST(ProgressLineTest, FitsEveryWidthWithoutWrapping) {
  for (size_t columns = 1; columns <= 200; ++columns) {
    const std::string line = RenderProgressLine(Running(), columns);
    EXPECT_LE(DisplayColumns(line), columns) << line;
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
}

TEST(ProgressLineTest, DropsFieldsLeastImportantFirst) {
  // The fields from the least important, with a text each shows.
  const std::vector<std::string> order = {"tok/s", "steps/s", "–", "|", "loss", "ETA", "%"};
  size_t previous_shown = 0;
  for (size_t columns = 200; columns >= 12; --columns) {
    const std::string line = RenderProgressLine(Running(), columns);
    EXPECT_THAT(line, HasSubstr("step 120/300"));
    // Once a field is gone, every field less important than it is gone too.
    size_t shown = 0;
    bool gone = false;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const bool present = line.find(*it) != std::string::npos;
      EXPECT_FALSE(present && gone) << columns << ": '" << *it << "' shown after a more "
                                    << "important field went: " << line;
      gone = gone || !present;
      shown += present ? 1 : 0;
    }
    EXPECT_TRUE(previous_shown == 0 || shown <= previous_shown) << line;
    previous_shown = shown;
  }
  // What each common width keeps.
  const std::string wide = RenderProgressLine(Running(), 119);
  for (const char* field : {"|", " 40%", "3.23 steps/s", "ETA 56s", "loss 2.3456", "–", "tok/s"}) {
    EXPECT_THAT(wide, HasSubstr(field));
  }
  const std::string eighty = RenderProgressLine(Running(), 79);
  for (const char* field : {"|", " 40%", "ETA 56s", "loss 2.3456", "2.22–"}) {
    EXPECT_THAT(eighty, HasSubstr(field)) << eighty;
  }
  const std::string sixty = RenderProgressLine(Running(), 59);
  for (const char* field : {"|", " 40%", "ETA 56s", "loss 2.3456"}) {
    EXPECT_THAT(sixty, HasSubstr(field)) << sixty;
  }
  EXPECT_THAT(sixty, Not(HasSubstr("tok/s")));
  EXPECT_EQ(RenderProgressLine(Running(), 8), "step 120");
}

TEST(ProgressLineTest, TheBarAndPercentageFollowTheSteps) {
  EXPECT_EQ(ProgressBar(0, 300, 10), "|          |");
  EXPECT_EQ(ProgressBar(150, 300, 10), "|█████     |");
  EXPECT_EQ(ProgressBar(300, 300, 10), "|██████████|");
  EXPECT_EQ(ProgressBar(1, 16, 2), "|▏ |");  // an eighth of a cell per 1/16
  EXPECT_EQ(ProgressBar(400, 300, 4), "|████|");
  ProgressLineFields fields = Running();
  fields.step = 299;
  EXPECT_THAT(RenderProgressLine(fields, 100), HasSubstr(" 99%"));  // 100 % only at the end
  fields.step = 300;
  EXPECT_THAT(RenderProgressLine(fields, 100), HasSubstr("100%"));
  fields.total = 0;  // unknown: no bar, no percentage
  const std::string unknown = RenderProgressLine(fields, 100);
  EXPECT_THAT(unknown, Not(HasSubstr("%")));
  EXPECT_THAT(unknown, Not(HasSubstr("|")));
  EXPECT_EQ(FormatStepRate(0.25), "4 steps/s");
  EXPECT_EQ(FormatStepRate(4.5), "4.5 s/step");
  EXPECT_EQ(FormatStepRate(-1), "");
}

TEST(ProgressLineTest, ThePaceGivesTheRateAndTimeLeft) {
  StepPace pace;
  EXPECT_EQ(pace.SecondsPerStep(), -1);
  pace.Add(10, 10'000, 0.4);
  EXPECT_DOUBLE_EQ(pace.SecondsPerStep(), 0.4);  // one step: its own time
  pace.Add(20, 15'000, 0.4);                     // ten steps in five seconds
  EXPECT_DOUBLE_EQ(pace.SecondsPerStep(), 0.5);
  EXPECT_DOUBLE_EQ(pace.SecondsLeft(100), 40.0);
  pace.Add(5, 16'000, 0.3);  // a restarted attempt: a new window
  EXPECT_DOUBLE_EQ(pace.SecondsPerStep(), 0.3);
}

TEST(SparklineScaleTest, NoiseOnAFlatLossDrawsNearlyFlat) {
  // ±0.1 % around 2.3: within the least span (10 % of 2.3), so at most two neighbouring heights.
  const std::vector<double> noisy = {2.300, 2.302, 2.298, 2.301, 2.299, 2.303, 2.297};
  const std::string line = Sparkline(noisy, 30);
  for (const char* block : {"▁", "▂", "▇", "█"}) EXPECT_THAT(line, Not(HasSubstr(block))) << line;
  // A real fall still fills the height.
  EXPECT_EQ(Sparkline({3.0, 2.5, 2.0}, 30), "█▅▁");
  EXPECT_EQ(FormatRange(RangeOf(noisy, 30)), "2.297–2.303");
  EXPECT_EQ(FormatRange(RangeOf({NAN, 1.5, INFINITY}, 30)), "1.5–1.5");
  EXPECT_EQ(FormatRange(RangeOf({NAN}, 30)), "");
  // The range is of the values drawn.
  EXPECT_EQ(FormatRange(RangeOf({100.0, 1.0, 2.0}, 2)), "1–2");
}

TEST(TerminalWidthTest, ColumnsFromTheTtyElseColumnsElseEighty) {
  // A pipe is no terminal: $COLUMNS decides, and 80 without a usable one.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  setenv("COLUMNS", "123", 1);
  EXPECT_EQ(TerminalColumns(fds[0]), 123u);
  for (const char* bad : {"", "abc", "0", "-5", "12x"}) {
    setenv("COLUMNS", bad, 1);
    EXPECT_EQ(TerminalColumns(fds[0]), 80u) << bad;
  }
  unsetenv("COLUMNS");
  EXPECT_EQ(TerminalColumns(fds[0]), 80u);
  close(fds[0]);
  close(fds[1]);
}

TEST(TerminalWidthTest, ATerminalsOwnWidthComesFirst) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const int terminal = open(ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  setenv("COLUMNS", "123", 1);
  struct winsize size {};
  size.ws_col = 57;
  size.ws_row = 24;
  ASSERT_EQ(ioctl(master, TIOCSWINSZ, &size), 0);
  EXPECT_EQ(TerminalColumns(terminal), 57u);
  size.ws_col = 91;  // resized: the next question gets the new width
  ASSERT_EQ(ioctl(master, TIOCSWINSZ, &size), 0);
  EXPECT_EQ(TerminalColumns(terminal), 91u);
  size.ws_col = 0;  // a terminal that does not know: $COLUMNS
  ASSERT_EQ(ioctl(master, TIOCSWINSZ, &size), 0);
  EXPECT_EQ(TerminalColumns(terminal), 123u);
  unsetenv("COLUMNS");
  close(terminal);
  close(master);
}

TEST(TerminalWidthTest, CountsAndCutsByCodePoint) {
  EXPECT_EQ(DisplayColumns("abc"), 3u);
  EXPECT_EQ(DisplayColumns("▁▂▃ 2.3–2.4"), 11u);
  EXPECT_EQ(FitColumns("▁▂▃abc", 2), "▁▂");
  EXPECT_EQ(FitColumns("ab", 5), "ab");
  EXPECT_EQ(FitColumns("ab", 0), "");
}

TEST(TerminalWidthTest, OneOffLinesWrapAtSpacesWithAHangingIndent) {
  const std::string state =
      "2026-12-05 22:00:30  SCHEDULED (attempt 1): attempt 1 on worker-a6fcc1a6-2, "
      "worker-a6fcc1a6-1";
  const std::vector<std::string> lines = WrapColumns(state, 59, 21);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "2026-12-05 22:00:30  SCHEDULED (attempt 1): attempt 1 on");
  EXPECT_EQ(lines[1], std::string(21, ' ') + "worker-a6fcc1a6-2, worker-a6fcc1a6-1");
  // Nothing is lost, and no line is wider than asked, whatever the width.
  for (size_t columns = 1; columns <= 100; ++columns) {
    std::string words;
    for (const std::string& line : WrapColumns(state, columns, 21)) {
      EXPECT_LE(DisplayColumns(line), columns) << columns << ": " << line;
      words += line;
    }
    std::string expected = state;
    for (std::string* text : {&words, &expected}) {
      text->erase(std::remove(text->begin(), text->end(), ' '), text->end());
    }
    EXPECT_EQ(words, expected) << columns;
  }
  EXPECT_EQ(WrapColumns("short", 80, 4), std::vector<std::string>{"short"});
  EXPECT_EQ(WrapColumns("", 80, 4), std::vector<std::string>{""});
  EXPECT_EQ(WrapColumns("abcdefgh", 4, 2), (std::vector<std::string>{"abcd", "  ef", "  gh"}));
}

}  // namespace
}  // namespace fsdpd::client
