#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <iostream>
#include <set>
#include <string>
#include <thread>

#include "client/commands.h"
#include "client/output.h"
#include "client/sparkline.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

// Estimates the time left from the pace of the last few reported steps.
class Progress {
 public:
  explicit Progress(int64_t total_steps) : total_steps_(total_steps) {}

  void Add(const v1::StepReport& step) {
    // A restarted attempt resumes from a checkpoint: an older step starts a new window.
    if (!window_.empty() && step.step() <= window_.back().step) window_.clear();
    window_.push_back({step.step(), step.unix_millis(), step.step_seconds()});
    if (window_.size() > kWindow) window_.pop_front();
  }

  double SecondsLeft() const {
    if (window_.empty() || total_steps_ <= 0) return -1;
    double seconds_per_step = window_.back().step_seconds;
    const Sample& first = window_.front();
    const Sample& last = window_.back();
    if (last.step > first.step && last.unix_millis > first.unix_millis) {
      seconds_per_step = (last.unix_millis - first.unix_millis) / 1000.0 /
                         static_cast<double>(last.step - first.step);
    }
    if (seconds_per_step <= 0) return -1;
    return seconds_per_step * static_cast<double>(std::max<int64_t>(0, total_steps_ - last.step));
  }

 private:
  static constexpr size_t kWindow = 20;
  struct Sample {
    int64_t step;
    int64_t unix_millis;
    double step_seconds;
  };
  int64_t total_steps_;
  std::deque<Sample> window_;
};

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

// Prints a job's events as they arrive: a line per state change, and a progress line with the
// recent loss as a sparkline (on a terminal) or one step line a second (otherwise); with --json,
// every event as one JSON line.
class EventPrinter {
 public:
  static constexpr size_t kLossSparklineSteps = 30;  // the steps the sparkline draws

  EventPrinter(const ClientOptions& options, const v1::Job& job)
      : json_(options.json),
        live_line_(!options.json && isatty(STDOUT_FILENO)),
        total_steps_(job.spec().train().steps()),
        progress_(total_steps_),
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
      std::cout << "job " << job_id << " " << StateName(state)
                << (reason.empty() ? "" : ": " + reason);
      if (last_step_.step() > 0) {
        std::cout << " (step " << last_step_.step() << "/" << total_steps_ << ", loss "
                  << FormatLoss(last_step_.loss()) << ")";
      }
      std::cout << std::endl;
    }
    return state == v1::SUCCEEDED ? 0 : 1;
  }

  v1::JobState final_state() const { return final_state_; }
  const std::string& final_reason() const { return final_reason_; }

 private:
  void PrintState(const v1::StateChange& change) {
    final_state_ = change.state();
    final_reason_ = change.reason();
    if (json_) {
      std::cout << StateEventToJson(change).dump() << std::endl;
      return;
    }
    EndProgressLine();
    std::cout << FormatTime(change.unix_millis()) << "  " << StateName(change.state())
              << (change.attempt() > 0 ? " (attempt " + std::to_string(change.attempt()) + ")" : "")
              << (change.reason().empty() ? "" : ": " + change.reason()) << std::endl;
  }

  void PrintStep(const v1::StepReport& step) {
    // A restarted attempt resumes from a checkpoint: its curve starts again.
    if (step.step() <= last_step_.step()) loss_history_.Clear();
    loss_history_.Add(step.loss());
    last_step_ = step;
    progress_.Add(step);
    if (json_) {
      std::cout << StepEventToJson(step).dump() << std::endl;
      return;
    }
    // Without a terminal, one line a second (and the last step) is enough for a log.
    const auto now = std::chrono::steady_clock::now();
    if (!live_line_ && step.step() != total_steps_ &&
        now - last_printed_ < std::chrono::seconds(1)) {
      return;
    }
    last_printed_ = now;
    const double left = progress_.SecondsLeft();
    std::cout << (live_line_ ? "\r\033[K" : "") << "step " << step.step() << "/" << total_steps_
              << "  loss " << FormatLoss(step.loss()) << "  tokens/s "
              << FormatRate(step.tokens_per_second()) << "  ETA "
              << (left >= 0 ? FormatDuration(left) : "-");
    if (live_line_) std::cout << "  " << loss_history_.Render();
    if (live_line_) {
      std::cout << std::flush;
      progress_line_open_ = true;
    } else {
      std::cout << std::endl;
    }
  }

  const bool json_;
  const bool live_line_;
  const int64_t total_steps_;
  Progress progress_;
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

  // A coordinator that goes away (a restart, an upgrade) is waited for, up to reconnect_for
  // from the moment it was lost, with a backoff of 0.5 s doubling to 5 s. The new stream replays
  // the job's history, and the printer skips what it printed already.
  bool lost = false;
  std::chrono::steady_clock::time_point lost_since;
  auto backoff = std::chrono::milliseconds(500);
  while (true) {
    v1::WatchJobRequest request;
    request.set_id(job_id);
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub->WatchJob(&context, request);
    v1::JobEvent event;
    while (reader->Read(&event)) {
      if (lost) {
        std::cerr << "fsdpctl: reconnected to " << options.coordinator << std::endl;
        lost = false;
        backoff = std::chrono::milliseconds(500);
      }
      printer.Print(event);
    }
    const grpc::Status status = reader->Finish();
    if (status.ok()) break;
    const auto now = std::chrono::steady_clock::now();
    printer.EndProgressLine();
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || reconnect_for.count() <= 0 ||
        (lost && now - lost_since >= reconnect_for)) {
      return Fail(DescribeError(status, options, job_id));
    }
    if (!lost) {
      std::cerr << "fsdpctl: lost the coordinator (" << status.error_message()
                << "); reconnecting for up to " << reconnect_for.count() << " s" << std::endl;
      lost = true;
      lost_since = now;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
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
