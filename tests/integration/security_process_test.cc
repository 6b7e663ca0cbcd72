// Security through the real binaries: fsdpd with TLS, a client CA and a tokens file made by
// `fsdpd hash-token`; fsdpctl with --tls-ca and --token-file; fsdpd-worker with and without a
// client certificate; and the loopback-only default.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/integration/process_harness.h"
#include "tests/unit/security_certificates.h"

namespace fsdpd::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

class SecureClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IsolateClientEnvironment(dir_.path());
    ASSERT_TRUE(MakeTestCertificates(dir_.path(), &certificates_))
        << ReadFile(dir_.path() + "/openssl.log");
  }

  std::string HashToken(const std::string& token, const std::string& role,
                        const std::string& name) {
    return HashTokenLine(dir_.path(), token, role, name);
  }

  bool StartCoordinator(const std::string& tokens_file) {
    coordinator_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("server/fsdpd"), "--listen", "127.0.0.1:0",
                                 "--metrics-listen", "", "--state-dir", dir_.path() + "/state",
                                 "--tls-cert", certificates_.server_pem, "--tls-key",
                                 certificates_.server_key, "--tls-client-ca", certificates_.ca_pem,
                                 "--tokens-file", tokens_file},
        dir_.path() + "/fsdpd.log");
    address_ = coordinator_->WaitForAddress("fsdpd listening on ", seconds(30));
    return !address_.empty();
  }

  CommandResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {BuildPath("client/fsdpctl"), "--coordinator", address_});
    return RunCommand(args, seconds(30));
  }

  TempDir dir_;
  TestCertificates certificates_;
  std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
};

TEST_F(SecureClusterTest, TokensRolesTlsAndWorkerCertificates) {
  const std::string tokens = dir_.path() + "/tokens";
  WriteFile(tokens, HashToken("viewer-secret", "viewer", "vera") +
                        HashToken("submitter-secret", "submitter", "sam"));
  ASSERT_TRUE(StartCoordinator(tokens)) << ReadFile(dir_.path() + "/fsdpd.log");
  const std::string spec = dir_.path() + "/job.yaml";
  WriteFile(spec, TinySpec("secure", 2, 1));

  // TLS, no token: the coordinator asks for one.
  CommandResult no_token = Ctl({"--tls-ca", certificates_.ca_pem, "list"});
  EXPECT_NE(no_token.exit_code, 0);
  EXPECT_THAT(no_token.err, HasSubstr("a bearer token is required"));

  // Plaintext against the TLS port fails, whatever the token.
  CommandResult plaintext = Ctl({"--token-file", dir_.path() + "/vera.token", "list"});
  EXPECT_NE(plaintext.exit_code, 0);
  EXPECT_THAT(plaintext.err, HasSubstr("cannot reach the coordinator"));

  // The CA and the token file from the environment, as a user would set them.
  setenv("FSDPD_TLS_CA", certificates_.ca_pem.c_str(), 1);
  setenv("FSDPD_TOKEN_FILE", (dir_.path() + "/vera.token").c_str(), 1);
  CommandResult viewer_list = Ctl({"list"});
  EXPECT_EQ(viewer_list.exit_code, 0) << viewer_list.err;
  CommandResult viewer_submit = Ctl({"submit", spec});
  EXPECT_NE(viewer_submit.exit_code, 0);
  EXPECT_THAT(viewer_submit.err, HasSubstr("permission denied"));
  EXPECT_THAT(viewer_submit.err, HasSubstr("needs the role submitter"));

  WriteFile(dir_.path() + "/wrong.token", "not-the-secret\n");
  CommandResult wrong = Ctl({"--token-file", dir_.path() + "/wrong.token", "list"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_THAT(wrong.err, HasSubstr("not valid"));

  CommandResult missing = Ctl({"--token-file", dir_.path() + "/absent.token", "list"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("--token-file: cannot open"));

  CommandResult submitted = Ctl({"--token-file", dir_.path() + "/sam.token", "submit", spec});
  EXPECT_EQ(submitted.exit_code, 0) << submitted.err;

  // A worker with no client certificate is refused and gives up: retrying cannot help.
  ChildProcess anonymous(
      {BuildPath("worker/fsdpd-worker"), "--coordinator", address_, "--device", "cpu",
       "--checkpoint-root", dir_.path() + "/checkpoints-a", "--tls-ca", certificates_.ca_pem},
      dir_.path() + "/worker-anonymous.log");
  ASSERT_TRUE(anonymous.WaitForExit(seconds(30))) << ReadFile(anonymous.log_path());
  EXPECT_THAT(ReadFile(anonymous.log_path()), HasSubstr("client certificate"));

  // With its certificate it registers and shows up.
  ChildProcess worker(
      {BuildPath("worker/fsdpd-worker"), "--coordinator", address_, "--device", "cpu",
       "--checkpoint-root", dir_.path() + "/checkpoints-b", "--tls-ca", certificates_.ca_pem,
       "--tls-cert", certificates_.client_pem, "--tls-key", certificates_.client_key},
      dir_.path() + "/worker.log");
  EXPECT_TRUE(worker.WaitForLog("registered with the coordinator", seconds(30)))
      << ReadFile(worker.log_path());
  CommandResult workers = Ctl({"--json", "workers"});
  ASSERT_EQ(workers.exit_code, 0) << workers.err;
  nlohmann::json listed = nlohmann::json::parse(workers.out, nullptr, false);
  ASSERT_TRUE(listed.is_object()) << workers.out;
  EXPECT_EQ(listed["workers"].size(), 1u) << workers.out;
}

TEST_F(SecureClusterTest, NetworkListenNeedsTlsOrInsecure) {
  // Port 0: the server that starts binds a port of its own.
  CommandResult plain = RunCommand({BuildPath("server/fsdpd"), "--listen", "0.0.0.0:0",
                                    "--metrics-listen", "", "--state-dir", dir_.path() + "/s1"},
                                   seconds(30));
  EXPECT_EQ(plain.exit_code, 2);
  EXPECT_THAT(plain.err, HasSubstr("not a loopback address"));
  EXPECT_THAT(plain.err, HasSubstr("--insecure"));

  ChildProcess with_tls({BuildPath("server/fsdpd"), "--listen", "0.0.0.0:0", "--metrics-listen", "",
                         "--state-dir", dir_.path() + "/s2", "--tls-cert", certificates_.server_pem,
                         "--tls-key", certificates_.server_key},
                        dir_.path() + "/fsdpd-tls.log");
  EXPECT_TRUE(with_tls.WaitForLog("fsdpd listening on", seconds(30)))
      << ReadFile(with_tls.log_path());

  CommandResult bad_key =
      RunCommand({BuildPath("server/fsdpd"), "--listen", "127.0.0.1:0", "--metrics-listen", "",
                  "--state-dir", dir_.path() + "/s3", "--tls-cert", certificates_.server_pem},
                 seconds(30));
  EXPECT_EQ(bad_key.exit_code, 2);
  EXPECT_THAT(bad_key.err, HasSubstr("--tls-cert and --tls-key must be given together"));
}

}  // namespace
}  // namespace fsdpd::testing
