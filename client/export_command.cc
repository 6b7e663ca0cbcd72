#include "client/commands.h"
#include "client/file_download.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {

int RunExport(const ClientOptions& options, const std::string& job_id,
              const std::string& output_path) {
  if (output_path.empty()) return Fail("-o: an output file (or - for stdout) is required");
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::ExportJobRequest request;
  request.set_id(job_id);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::FileChunk>> reader = stub->ExportJob(&context, request);
  return DownloadFile(&context, reader.get(), options, job_id, output_path, "model");
}

}  // namespace fsdpd::client
