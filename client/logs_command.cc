#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <unordered_set>

#include "client/commands.h"
#include "client/output.h"
#include "client/reconnect.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

// Which lines of a reopened stream were printed already. A reopened stream replays the job's
// stored lines from the start, without their sequence numbers, so a line is known by its
// content: attempt, rank, time (ms), level and text, and printed once. A coordinator may also
// send one line twice (a worker resends what a restarted coordinator had not confirmed), which
// this catches too. Two lines of one rank with the same text in the same millisecond print once.
class LogResume {
 public:
  // A new stream begins: the second and later ones replay from the job's first line.
  void BeginStream() {
    ++streams_;
    anchor_seen_ = false;
  }

  // Whether `line` is new. With --tail, the lines a reopened stream replays before the first
  // line printed are older than the tail, never printed and skipped.
  bool IsNew(const v1::LogLine& line, bool tailed) {
    const uint64_t key = Key(line);
    if (streams_ == 1 && tailed && !anchor_) anchor_ = key;
    if (streams_ > 1 && anchor_ && !anchor_seen_) {
      if (key != *anchor_) return false;
      anchor_seen_ = true;
    }
    return printed_.insert(key).second;
  }

 private:
  static uint64_t Key(const v1::LogLine& line) {
    return std::hash<std::string>{}(
        std::to_string(line.attempt()) + '\n' + std::to_string(line.rank()) + '\n' +
        std::to_string(line.unix_millis()) + '\n' + line.level() + '\n' + line.text());
  }

  std::unordered_set<uint64_t> printed_;
  int streams_ = 0;
  std::optional<uint64_t> anchor_;  // the first line printed, with --tail
  bool anchor_seen_ = false;
};

void PrintLine(const ClientOptions& options, const v1::LogLine& line) {
  if (options.json) {
    std::cout << LogLineToJson(line).dump() << std::endl;
  } else {
    std::cout << FormatTime(line.unix_millis()) << "  rank " << line.rank() << "  " << line.level()
              << "  " << line.text() << std::endl;
  }
}

}  // namespace

int RunLogs(const ClientOptions& options, const std::string& job_id, bool follow, int64_t tail,
            std::chrono::seconds reconnect_for) {
  if (tail < 0) return Fail("--tail: must not be negative");
  auto stub = v1::JobService::NewStub(Connect(options));
  // Whether the job has ended; an error status when the coordinator could not say.
  auto job_ended = [&](bool* ended) {
    v1::GetJobRequest request;
    request.set_id(job_id);
    v1::Job job;
    grpc::ClientContext context;
    SetUnaryDeadline(&context);
    grpc::Status status = stub->GetJob(&context, request, &job);
    if (status.ok()) *ended = IsTerminal(job.state());
    return status;
  };

  LogResume resume;
  Reconnector reconnector(options, follow ? reconnect_for : std::chrono::seconds(0));
  bool first = true;
  while (true) {
    // After a loss, the coordinator must answer before the stream is opened again.
    bool ended = false;
    if (!first) {
      if (grpc::Status probe = job_ended(&ended); !probe.ok()) {
        if (!reconnector.WaitToRetry(probe)) return Fail(DescribeError(probe, options, job_id));
        continue;
      }
      reconnector.Answered();
    }
    v1::GetJobLogsRequest request;
    request.set_id(job_id);
    request.set_follow(follow);
    request.set_tail(first ? tail : 0);
    first = false;
    resume.BeginStream();
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::LogLine>> reader = stub->GetJobLogs(&context, request);
    v1::LogLine line;
    while (reader->Read(&line)) {
      if (resume.IsNew(line, tail > 0)) PrintLine(options, line);
    }
    grpc::Status status = reader->Finish();
    if (status.ok() && follow) {
      // A followed stream ends when the job ends, and also when its coordinator shuts down:
      // the job's state tells them apart.
      status = job_ended(&ended);
      if (status.ok() && !ended) {
        status =
            grpc::Status(grpc::StatusCode::UNAVAILABLE, "the log stream ended before the job did");
      }
    }
    if (status.ok()) return 0;
    if (!reconnector.WaitToRetry(status)) return Fail(DescribeError(status, options, job_id));
  }
}

}  // namespace fsdpd::client
