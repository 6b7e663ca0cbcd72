#include "client/file_download.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "client/output.h"

namespace fsdpd::client {

int DownloadFile(grpc::ClientContext* context, grpc::ClientReader<v1::FileChunk>* reader,
                 const ClientOptions& options, const std::string& job_id,
                 const std::string& output_path, const std::string& what) {
  const std::string partial_path = output_path + ".partial";
  std::ofstream out(partial_path, std::ios::binary | std::ios::trunc);
  if (!out) {
    context->TryCancel();
    reader->Finish();
    return Fail("cannot write " + partial_path);
  }
  auto discard = [&](const std::string& message) {
    out.close();
    std::remove(partial_path.c_str());
    return Fail(message);
  };

  v1::FileChunk chunk;
  int64_t written = 0;
  int64_t total = -1;
  while (reader->Read(&chunk)) {
    if (chunk.offset() != written) {
      context->TryCancel();
      reader->Finish();
      return discard("the coordinator sent a chunk at offset " + std::to_string(chunk.offset()) +
                     " where " + std::to_string(written) + " was expected");
    }
    out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    written += static_cast<int64_t>(chunk.data().size());
    total = chunk.total_bytes();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return discard(DescribeError(status, options, job_id));
  if (total >= 0 && written != total) {
    return discard("the " + what + " ended after " + std::to_string(written) + " of " +
                   std::to_string(total) + " bytes");
  }
  out.close();
  if (!out) return discard("writing " + partial_path + " failed");
  std::error_code error;
  std::filesystem::rename(partial_path, output_path, error);
  if (error) return discard("cannot rename " + partial_path + ": " + error.message());

  if (options.json) {
    std::cout << nlohmann::json{{"id", job_id}, {"path", output_path}, {"bytes", written}}.dump()
              << std::endl;
  } else {
    std::cout << "wrote the " << what << " (" << FormatBytes(written) << ") to " << output_path
              << std::endl;
  }
  return 0;
}

}  // namespace fsdpd::client
