// fsdpctl export JOB [--step N] -o FILE: asks the coordinator to prepare the export
// (PrepareExport: a SUCCEEDED job's final model, or a complete checkpoint of any job, which an
// idle worker consolidates), polls it every half second while it is prepared, with one line of
// progress on a terminal (stderr) and a line per change otherwise, then streams the file. For a
// llama job -o names a folder that transformers loads as it is: the file goes to
// FOLDER/model.safetensors (its tensors carry Hugging Face's names) and FOLDER/config.json is
// written from the job's spec (proto/spec/hf_config.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/file_download.h"
#include "fsdpd/v1/jobs.grpc.pb.h"
#include "proto/spec/hf_config.h"

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

// Creates `folder` (and its parents) unless it is a folder already; false with `error` set when
// it exists as something else or cannot be made.
bool PrepareFolder(const std::string& folder, std::string* error) {
  namespace fs = std::filesystem;
  std::error_code code;
  const fs::file_status status = fs::status(folder, code);
  if (status.type() == fs::file_type::directory) return true;
  if (status.type() != fs::file_type::not_found) {
    *error = "-o " + folder +
             ": a llama job exports a folder (config.json and model.safetensors), and this "
             "exists and is not a folder";
    return false;
  }
  if (!fs::create_directories(folder, code) && code) {
    *error = "-o " + folder + ": cannot create the folder: " + code.message();
    return false;
  }
  return true;
}

// Writes `text` to `path` through a file beside it renamed into place.
bool WriteTextFile(const std::string& path, const std::string& text, std::string* error) {
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::remove(partial.c_str());
      *error = "cannot write " + partial;
      return false;
    }
  }
  std::error_code code;
  std::filesystem::rename(partial, path, code);
  if (code) {
    std::remove(partial.c_str());
    *error = "cannot rename " + partial + ": " + code.message();
    return false;
  }
  return true;
}

}  // namespace

int RunExport(const ClientOptions& options, const std::string& job_id,
              const std::string& output_path, int64_t step) {
  if (output_path.empty()) return Fail("-o: an output file (or - for stdout) is required");
  if (step < 0) return Fail(absl::StrCat("--step: must be positive (got ", step, ")"));
  // A target no job could export to is refused before connecting; an existing folder waits for
  // the job's architecture.
  std::string target_error;
  if (!ResolveOutputTarget(output_path, &target_error) &&
      !std::filesystem::is_directory(output_path)) {
    return Fail(target_error);
  }
  auto stub = v1::JobService::NewStub(Connect(options));
  // The architecture decides the form: one file for MiniLLM, a folder for llama.
  v1::Job job;
  if (grpc::Status status = FetchJob(*stub, job_id, &job); !status.ok()) {
    return Fail(DescribeError(status, options, job_id));
  }
  const bool folder = job.spec().model().arch() == "llama";
  std::string file_path = output_path;
  if (folder) {
    if (output_path == "-") {
      return Fail(
          "-o -: a llama job exports a folder (config.json and model.safetensors); name one");
    }
    if (!PrepareFolder(output_path, &target_error)) return Fail(target_error);
    file_path = (std::filesystem::path(output_path) / "model.safetensors").string();
  }
  if (!ResolveOutputTarget(file_path, &target_error)) return Fail(target_error);

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
  const int downloaded = DownloadFile(
      &context, reader.get(), options, job_id, file_path,
      prepared.step() == 0 ? "model" : absl::StrCat("model of step ", prepared.step()));
  if (downloaded != 0 || !folder) return downloaded;
  const std::string config_path = (std::filesystem::path(output_path) / "config.json").string();
  if (!WriteTextFile(config_path, LlamaHfConfigJson(job.spec()), &target_error)) {
    return Fail(target_error);
  }
  if (!options.json) {
    std::cout << "wrote " << config_path << ": transformers' LlamaForCausalLM.from_pretrained(\""
              << output_path << "\") loads the folder" << std::endl;
  }
  return 0;
}

}  // namespace fsdpd::client
