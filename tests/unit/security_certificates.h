// Test-time certificates made with the openssl command: a CA, a server certificate for
// localhost/127.0.0.1 and a worker (client) certificate signed by it, plus a client certificate
// from an unrelated CA. Nothing is committed: every test run makes fresh ones.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace fsdpd::testing {

struct TestCertificates {
  std::string directory;
  std::string ca_pem, server_pem, server_key, client_pem, client_key;
  std::string rogue_client_pem, rogue_client_key;  // signed by a CA the server does not trust
};

inline std::string ReadTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream content;
  content << file.rdbuf();
  return content.str();
}

// Returns false (and leaves the reason in <directory>/openssl.log) if openssl failed.
inline bool MakeTestCertificates(const std::string& directory, TestCertificates* out) {
  const std::string d = directory;
  const std::string log = " >>" + d + "/openssl.log 2>&1";
  const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2";
  std::ofstream(d + "/server.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                   << "extendedKeyUsage=serverAuth\n";
  std::ofstream(d + "/client.ext") << "extendedKeyUsage=clientAuth\n";
  const std::string ca_ext =
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign";
  const std::string commands[] = {
      "openssl req -x509" + key + " -subj /CN=fsdpd-test-ca" + ca_ext + " -keyout " + d +
          "/ca.key -out " + d + "/ca.pem",
      "openssl req -x509" + key + " -subj /CN=rogue-ca" + ca_ext + " -keyout " + d +
          "/rogue-ca.key -out " + d + "/rogue-ca.pem",
      "openssl req" + key + " -subj /CN=localhost -keyout " + d + "/server.key -out " + d +
          "/server.csr",
      "openssl x509 -req -in " + d + "/server.csr -CA " + d + "/ca.pem -CAkey " + d +
          "/ca.key -CAcreateserial -days 2 -extfile " + d + "/server.ext -out " + d + "/server.pem",
      "openssl req" + key + " -subj /CN=worker-1 -keyout " + d + "/client.key -out " + d +
          "/client.csr",
      "openssl x509 -req -in " + d + "/client.csr -CA " + d + "/ca.pem -CAkey " + d +
          "/ca.key -CAcreateserial -days 2 -extfile " + d + "/client.ext -out " + d + "/client.pem",
      "openssl req" + key + " -subj /CN=intruder -keyout " + d + "/rogue.key -out " + d +
          "/rogue.csr",
      "openssl x509 -req -in " + d + "/rogue.csr -CA " + d + "/rogue-ca.pem -CAkey " + d +
          "/rogue-ca.key -CAcreateserial -days 2 -extfile " + d + "/client.ext -out " + d +
          "/rogue.pem",
  };
  for (const std::string& command : commands) {
    if (std::system((command + log).c_str()) != 0) return false;
  }
  out->directory = d;
  out->ca_pem = d + "/ca.pem";
  out->server_pem = d + "/server.pem";
  out->server_key = d + "/server.key";
  out->client_pem = d + "/client.pem";
  out->client_key = d + "/client.key";
  out->rogue_client_pem = d + "/rogue.pem";
  out->rogue_client_key = d + "/rogue.key";
  return true;
}

}  // namespace fsdpd::testing
