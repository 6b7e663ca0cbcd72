// fsdpctl export JOB [--step N] -o FILE: asks the coordinator to prepare the export
// (PrepareExport: a SUCCEEDED job's final model, or a complete checkpoint of any job, which an
// idle worker consolidates), polls it every half second while it is prepared, with one line of
// progress on a terminal (stderr) and a line per change otherwise, then streams the file.
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/file_download.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(500);

// Where the preparation stands, shown while it is not READY.
class PrepareProgress {
 public:
  explicit PrepareProgress(bool quiet) : quiet_(quiet), live_(!quiet && isatty(STDERR_FILENO)) {}
  ~PrepareProgress() { Done(); }

  void Show(const std::string& text) {
    if (quiet_ || text == last_) return;
    last_ = text;
    if (live_) {
      std::cerr << "\r\033[K" << text << std::flush;
      drawn_ = true;
    } else {
      std::cerr << text << std::endl;
    }
  }
  void Done() {
    if (drawn_) std::cerr << "\r\033[K" << std::flush;
    drawn_ = false;
  }

 private:
  const bool quiet_;
  const bool live_;
  bool drawn_ = false;
  std::string last_;
};

}  // namespace

int RunExport(const ClientOptions& options, const std::string& job_id,
              const std::string& output_path, int64_t step) {
  if (output_path.empty()) return Fail("-o: an output file (or - for stdout) is required");
  if (step < 0) return Fail(absl::StrCat("--step: must be positive (got ", step, ")"));
  std::string target_error;
  if (!ResolveOutputTarget(output_path, &target_error)) return Fail(target_error);
  auto stub = v1::JobService::NewStub(Connect(options));

  PrepareProgress progress(options.json);
  v1::ExportStatus prepared;
  while (true) {
    v1::PrepareExportRequest request;
    request.set_id(job_id);
    request.set_step(step);
    grpc::ClientContext context;
    SetUnaryDeadline(&context);
    grpc::Status status = stub->PrepareExport(&context, request, &prepared);
    if (!status.ok()) {
      progress.Done();
      return Fail(DescribeError(status, options, job_id));
    }
    if (prepared.state() == v1::ExportStatus::READY) break;
    if (prepared.state() == v1::ExportStatus::FAILED) {
      progress.Done();
      return Fail(absl::StrCat("cannot export job ", job_id, ": ", prepared.message()));
    }
    progress.Show(
        absl::StrCat("preparing step ", prepared.step(), " of ", job_id, ": ", prepared.message()));
    std::this_thread::sleep_for(kPollInterval);
  }
  progress.Done();

  v1::ExportJobRequest request;
  request.set_id(job_id);
  request.set_step(prepared.step());  // 0: the final model of a SUCCEEDED job
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::FileChunk>> reader = stub->ExportJob(&context, request);
  return DownloadFile(
      &context, reader.get(), options, job_id, output_path,
      prepared.step() == 0 ? "model" : absl::StrCat("model of step ", prepared.step()));
}

}  // namespace fsdpd::client
