#include <unistd.h>

#include <chrono>
#include <iostream>
#include <set>
#include <string>

#include "client/commands.h"
#include "client/output.h"
#include "client/progress_line.h"
#include "client/reconnect.h"
#include "client/sparkline.h"
#include "client/terminal_width.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

// What identifies an event in a job's history: a state change by its attempt, state and time, a
// step by its attempt and number.
std::string EventKey(const v1::JobEvent& event) {
  if (event.has_state()) {
    const v1::StateChange& change = event.state();
    return "state/" + std::to_string(change.attempt()) + "/" + std::to_string(change.state()) +
           "/" + std::to_string(change.unix_millis());
  }
  return "step/" + std::to_string(event.step().attempt()) + "/" +
         std::to_string(event.step().step());
}

// Prints a job's events as they arrive: a line per state change, and on a terminal one progress
// line redrawn in place (client/progress_line.h: a bar, the rate, the ETA and the recent loss as
// a sparkline with its range, fitted to the terminal's width), otherwise one step line a second;
// with --json, every event as one JSON line.
class EventPrinter {
 public:
  static constexpr size_t kLossSparklineSteps = 30;  // the most steps the sparkline draws

  EventPrinter(const ClientOptions& options, const v1::Job& job)
      : json_(options.json),
        live_line_(!options.json && isatty(STDOUT_FILENO)),
        total_steps_(job.spec().train().steps()),
        final_state_(job.state()),
        final_reason_(job.reason()) {}

  // Prints an event unless it was printed before (a replay after reconnecting repeats them).
  void Print(const v1::JobEvent& event) {
    if (!seen_.insert(EventKey(event)).second) return;
    if (event.has_state()) {
      PrintState(event.state());
    } else if (event.has_step()) {
      PrintStep(event.step());
    }
  }

  // Ends an open progress line, before anything else is printed.
  void EndProgressLine() {
    if (progress_line_open_) std::cout << "\n";
    progress_line_open_ = false;
  }

  // The closing summary line (not with --json); the exit status: 0 only if the job SUCCEEDED.
  int Finish(const std::string& job_id, v1::JobState state, const std::string& reason) {
    EndProgressLine();
    if (!json_) {
      std::string line =
          "job " + job_id + " " + StateName(state) + (reason.empty() ? "" : ": " + reason);
      if (last_step_.step() > 0) {
        line += " (step " + std::to_string(last_step_.step()) + "/" + std::to_string(total_steps_) +
                ", loss " + FormatLoss(last_step_.loss()) + ")";
      }
      PrintLine(line, 4);
    }
    return state == v1::SUCCEEDED ? 0 : 1;
  }

  v1::JobState final_state() const { return final_state_; }
  const std::string& final_reason() const { return final_reason_; }

 private:
  // A line printed once; on a terminal broken at spaces to its width, the rest indented by
  // `indent`, so that it neither wraps mid-word nor loses anything.
  void PrintLine(const std::string& line, size_t indent) {
    if (!live_line_) {
      std::cout << line << std::endl;
      return;
    }
    const size_t columns = TerminalColumns(STDOUT_FILENO);
    for (const std::string& part : WrapColumns(line, columns > 1 ? columns - 1 : 1, indent)) {
      std::cout << part << "\n";
    }
    std::cout << std::flush;
  }

  void PrintState(const v1::StateChange& change) {
    final_state_ = change.state();
    final_reason_ = change.reason();
    if (json_) {
      std::cout << StateEventToJson(change).dump() << std::endl;
      return;
    }
    EndProgressLine();
    const std::string time = FormatTime(change.unix_millis()) + "  ";
    PrintLine(
        time + StateName(change.state()) +
            (change.attempt() > 0 ? " (attempt " + std::to_string(change.attempt()) + ")" : "") +
            (change.reason().empty() ? "" : ": " + change.reason()),
        time.size());
  }

  void PrintStep(const v1::StepReport& step) {
    // A restarted attempt resumes from a checkpoint: its curve starts again.
    if (step.step() <= last_step_.step()) loss_history_.Clear();
    loss_history_.Add(step.loss());
    last_step_ = step;
    pace_.Add(step.step(), step.unix_millis(), step.step_seconds());
    if (json_) {
      std::cout << StepEventToJson(step).dump() << std::endl;
      return;
    }
    // A validated step gets a line of its own, kept above the progress line, beside its loss.
    if (step.has_eval_loss()) {
      EndProgressLine();
      std::cout << "step " << step.step() << "/" << total_steps_ << "  loss "
                << FormatLoss(step.loss()) << "  eval loss " << FormatLoss(step.eval_loss())
                << std::endl;
    }
    // Without a terminal, one line a second (and the last step) is enough for a log.
    const auto now = std::chrono::steady_clock::now();
    if (!live_line_ && step.step() != total_steps_ &&
        (step.has_eval_loss() || now - last_printed_ < std::chrono::seconds(1))) {
      return;
    }
    last_printed_ = now;
    const double left = pace_.SecondsLeft(total_steps_);
    if (!live_line_) {
      std::cout << "step " << step.step() << "/" << total_steps_ << "  loss "
                << FormatLoss(step.loss()) << "  tokens/s " << FormatRate(step.tokens_per_second())
                << "  ETA " << (left >= 0 ? FormatDuration(left) : "-") << std::endl;
      return;
    }
    ProgressLineFields fields;
    fields.step = step.step();
    fields.total = total_steps_;
    fields.eta = left >= 0 ? FormatDuration(left) : "-";
    fields.rate = FormatStepRate(pace_.SecondsPerStep());
    fields.loss = FormatLoss(step.loss());
    fields.loss_history = loss_history_.values();
    if (step.tokens_per_second() > 0)
      fields.tokens_per_second = FormatRate(step.tokens_per_second());
    // The width is asked each redraw, so a resized terminal is followed. The last column stays
    // free: a line that fills it leaves some terminals' cursor waiting to wrap.
    const size_t columns = TerminalColumns(STDOUT_FILENO);
    std::cout << "\r" << RenderProgressLine(fields, columns > 1 ? columns - 1 : 1) << "\033[K"
              << std::flush;
    progress_line_open_ = true;
  }

  const bool json_;
  const bool live_line_;
  const int64_t total_steps_;
  StepPace pace_;
  v1::JobState final_state_;
  std::string final_reason_;
  v1::StepReport last_step_;
  SparklineSeries loss_history_{kLossSparklineSteps};
  std::set<std::string> seen_;
  bool progress_line_open_ = false;
  std::chrono::steady_clock::time_point last_printed_;
};

}  // namespace

int RunWatch(const ClientOptions& options, const std::string& job_id,
             std::chrono::seconds reconnect_for) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::Job job;
  {
    v1::GetJobRequest request;
    request.set_id(job_id);
    grpc::ClientContext context;
    SetUnaryDeadline(&context);
    grpc::Status status = stub->GetJob(&context, request, &job);
    if (!status.ok()) return Fail(DescribeError(status, options, job_id));
  }
  EventPrinter printer(options, job);

  // A coordinator that goes away is waited for (client/reconnect.h). The new stream replays the
  // job's history, and the printer skips what it printed already.
  Reconnector reconnector(options, reconnect_for);
  while (true) {
    v1::WatchJobRequest request;
    request.set_id(job_id);
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub->WatchJob(&context, request);
    v1::JobEvent event;
    while (reader->Read(&event)) {
      reconnector.Answered();
      printer.Print(event);
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) break;
    printer.EndProgressLine();
    if (!reconnector.WaitToRetry(status)) return Fail(DescribeError(status, options, job_id));
  }

  v1::JobState final_state = printer.final_state();
  std::string final_reason = printer.final_reason();
  if (!IsTerminal(final_state)) {
    // The stream ends at a terminal state; ask once more in case its event was not seen.
    v1::GetJobRequest get;
    get.set_id(job_id);
    grpc::ClientContext get_context;
    SetUnaryDeadline(&get_context);
    if (stub->GetJob(&get_context, get, &job).ok()) {
      final_state = job.state();
      final_reason = job.reason();
    }
  }
  return printer.Finish(job_id, final_state, final_reason);
}

}  // namespace fsdpd::client
