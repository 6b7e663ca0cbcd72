// One export of a committed checkpoint, asked for by the coordinator (ExportRequest): on a
// thread of its own, so the session keeps heartbeating, the worker consolidates the rank files
// of <checkpoint root>/<job uid>/step-N (worker/checkpoint/consolidate.h) into
// <checkpoint root>/<job uid>/<artifact name> and queues it in the outbox, which uploads it as
// ArtifactChunks of attempt 0 and then sends the ExportResult. A failure (a job uid that is no
// single path component, a missing or corrupt rank file) is an ExportResult naming it.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "fsdpd/v1/worker.pb.h"
#include "worker/session_outbox.h"

namespace fsdpd {

class ExportRun {
 public:
  // `outbox` must outlive the run.
  ExportRun(v1::ExportRequest request, std::string checkpoint_root,
            std::vector<std::string> allowed_roots, Outbox* outbox);
  ~ExportRun();  // joins the thread
  ExportRun(const ExportRun&) = delete;
  ExportRun& operator=(const ExportRun&) = delete;

  void Start();
  bool Finished() const { return finished_.load(); }
  const v1::ExportRequest& request() const { return request_; }

 private:
  void Body();

  const v1::ExportRequest request_;
  const std::string checkpoint_root_;
  const std::vector<std::string> allowed_roots_;
  Outbox* outbox_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// The ExportResult of a request refused before it started (the worker is busy exporting).
FinishedExport RefusedExport(const v1::ExportRequest& request, const std::string& why);

}  // namespace fsdpd
