// Writes a chunked file stream (export, trace) to disk, or to stdout for "-o -". On disk it is
// written beside the target first and renamed at the end, so a failed download never leaves a
// torn file behind. Only a regular file is ever written or replaced: a target that is a FIFO, a
// device, a directory or a socket (after following symbolic links) is refused before anything
// is opened.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "client/client_context.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {

// Where `-o PATH` writes: stdout for "-", else PATH with its symbolic links resolved.
struct OutputTarget {
  bool to_stdout = false;
  std::string path;  // resolved; empty for stdout
};

// The target of `-o output_path`, or an error message naming the path: a target that exists
// and is not a regular file, a symbolic link to nothing, or stdout when it is a terminal.
std::optional<OutputTarget> ResolveOutputTarget(const std::string& output_path, std::string* error);

// Reads every chunk, checks offsets and the total, and prints the outcome (to stderr when the
// file itself goes to stdout). `what` names the download in messages ("model", "trace").
// Returns the exit status.
int DownloadFile(grpc::ClientContext* context, grpc::ClientReader<v1::FileChunk>* reader,
                 const ClientOptions& options, const std::string& job_id,
                 const std::string& output_path, const std::string& what);

}  // namespace fsdpd::client
