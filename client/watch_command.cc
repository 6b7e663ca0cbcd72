#include <unistd.h>

#include <chrono>
#include <deque>
#include <iostream>

#include "client/commands.h"
#include "client/output.h"
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

}  // namespace

int RunWatch(const ClientOptions& options, const std::string& job_id) {
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
  const int64_t total_steps = job.spec().train().steps();
  const bool live_line = !options.json && isatty(STDOUT_FILENO);
  Progress progress(total_steps);
  v1::JobState final_state = job.state();
  std::string final_reason = job.reason();
  v1::StepReport last_step;
  bool progress_line_open = false;
  auto last_printed = std::chrono::steady_clock::time_point();

  auto end_progress_line = [&] {
    if (progress_line_open) std::cout << "\n";
    progress_line_open = false;
  };

  v1::WatchJobRequest request;
  request.set_id(job_id);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = stub->WatchJob(&context, request);
  v1::JobEvent event;
  while (reader->Read(&event)) {
    if (event.has_state()) {
      const v1::StateChange& change = event.state();
      final_state = change.state();
      final_reason = change.reason();
      if (options.json) {
        std::cout << StateEventToJson(change).dump() << std::endl;
        continue;
      }
      end_progress_line();
      std::cout << FormatTime(change.unix_millis()) << "  " << StateName(change.state())
                << (change.attempt() > 0 ? " (attempt " + std::to_string(change.attempt()) + ")"
                                         : "")
                << (change.reason().empty() ? "" : ": " + change.reason()) << std::endl;
    } else if (event.has_step()) {
      const v1::StepReport& step = event.step();
      last_step = step;
      progress.Add(step);
      if (options.json) {
        std::cout << StepEventToJson(step).dump() << std::endl;
        continue;
      }
      // Without a terminal, one line a second (and the last step) is enough for a log.
      const auto now = std::chrono::steady_clock::now();
      if (!live_line && step.step() != total_steps &&
          now - last_printed < std::chrono::seconds(1)) {
        continue;
      }
      last_printed = now;
      const double left = progress.SecondsLeft();
      std::cout << (live_line ? "\r\033[K" : "") << "step " << step.step() << "/" << total_steps
                << "  loss " << FormatLoss(step.loss()) << "  tokens/s "
                << FormatRate(step.tokens_per_second()) << "  ETA "
                << (left >= 0 ? FormatDuration(left) : "-");
      if (live_line) {
        std::cout << std::flush;
        progress_line_open = true;
      } else {
        std::cout << std::endl;
      }
    }
  }
  grpc::Status status = reader->Finish();
  end_progress_line();
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));

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
  if (!options.json) {
    std::cout << "job " << job_id << " " << StateName(final_state)
              << (final_reason.empty() ? "" : ": " + final_reason);
    if (last_step.step() > 0) {
      std::cout << " (step " << last_step.step() << "/" << total_steps << ", loss "
                << FormatLoss(last_step.loss()) << ")";
    }
    std::cout << std::endl;
  }
  return final_state == v1::SUCCEEDED ? 0 : 1;
}

}  // namespace fsdpd::client
