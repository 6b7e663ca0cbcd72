// Writes a chunked file stream (export, trace) to disk: beside the target first and renamed
// at the end, so a failed download never leaves a torn file behind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "client/client_context.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {

// Reads every chunk, checks offsets and the total, and prints the outcome. `what` names the
// download in messages ("model", "trace"). Returns the exit status.
int DownloadFile(grpc::ClientContext* context, grpc::ClientReader<v1::FileChunk>* reader,
                 const ClientOptions& options, const std::string& job_id,
                 const std::string& output_path, const std::string& what);

}  // namespace fsdpd::client
