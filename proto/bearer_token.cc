#include "proto/bearer_token.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace fsdpd {
namespace {

constexpr size_t kMaxTokenBytes = 4096;

// Adds the bearer token to every call's initial metadata, so no call has to remember it.
class BearerTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token) : header_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

absl::Status LoadTokenFile(const std::string& path, std::string* token) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("--token-file: cannot open ", path));
  std::string line;
  std::getline(file, line);
  while (!line.empty() && absl::ascii_isspace(static_cast<unsigned char>(line.back()))) {
    line.pop_back();
  }
  bool printable = !line.empty() && line.size() <= kMaxTokenBytes;
  for (char c : line) printable = printable && absl::ascii_isgraph(static_cast<unsigned char>(c));
  if (!printable) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file: the first line of ", path,
                                                   " must hold the token (1..", kMaxTokenBytes,
                                                   " printable characters without whitespace)"));
  }
  *token = line;
  return absl::OkStatus();
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
BearerTokenInterceptors(const std::string& token) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  if (!token.empty()) factories.push_back(std::make_unique<BearerTokenFactory>(token));
  return factories;
}

}  // namespace fsdpd
