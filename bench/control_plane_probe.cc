#include "bench/control_plane_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace fsdpd::bench {

std::vector<std::string> RegistrationBoundsFor(int workers) {
  return {"--max-workers", absl::StrCat(std::max(4096, workers + 16)), "--register-rate",
          absl::StrCat(std::max(20, workers))};
}

CoordinatorProcess::~CoordinatorProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

namespace {

// The port after the last ':' of `text` from `from` on, up to the first character that is no
// digit; 0 when there is none.
int PortAfter(const std::string& text, size_t from) {
  const size_t colon = text.find(':', from);
  if (colon == std::string::npos) return 0;
  int port = 0;
  for (size_t i = colon + 1; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    port = port * 10 + (text[i] - '0');
  }
  return port;
}

}  // namespace

absl::Status CoordinatorProcess::Start(const std::string& binary, const std::string& state_dir,
                                       const std::vector<std::string>& extra_args) {
  // fsdpd makes its state folder, but the log goes there before it starts (--state-dir may
  // name a folder that does not exist yet).
  std::error_code made;
  std::filesystem::create_directories(state_dir, made);
  if (made) {
    return absl::InternalError(absl::StrCat("state folder ", state_dir, ": ", made.message()));
  }
  int out[2];
  if (pipe(out) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  const std::string log_path = state_dir + "/fsdpd.log";
  // Port 0: fsdpd binds a port of the system's choice and says which (below), so no other
  // process can take it between a pick and the bind.
  std::vector<std::string> args = {binary,        "--listen",    "127.0.0.1:0", "--metrics-listen",
                                   "127.0.0.1:0", "--state-dir", state_dir};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    if (FILE* log = std::fopen(log_path.c_str(), "w")) dup2(fileno(log), STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  // fsdpd prints one line on stdout once it serves: "fsdpd listening on ...".
  std::string seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (seen.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd poll_fd{out[0], POLLIN, 0};
    if (left.count() <= 0 || poll(&poll_fd, 1, static_cast<int>(left.count())) <= 0) {
      close(out[0]);
      return absl::DeadlineExceededError(
          absl::StrCat(binary, " did not print its listening line within 20 s; see ", log_path));
    }
    char buffer[256];
    const ssize_t got = read(out[0], buffer, sizeof(buffer));
    if (got <= 0) {
      close(out[0]);
      return absl::InternalError(absl::StrCat(binary, " exited at startup; see ", log_path));
    }
    seen.append(buffer, static_cast<size_t>(got));
  }
  close(out[0]);
  const size_t listening = seen.find("listening on ");
  if (listening == std::string::npos || (grpc_port_ = PortAfter(seen, listening)) == 0) {
    return absl::InternalError(absl::StrCat("unexpected first line from fsdpd: ", seen));
  }
  // The log names the metrics port before fsdpd prints its listening line.
  std::ifstream log(log_path);
  for (std::string line; std::getline(log, line);) {
    const size_t metrics = line.find("metrics on ");
    if (metrics != std::string::npos) metrics_port_ = PortAfter(line, metrics);
  }
  if (metrics_port_ == 0) {
    return absl::InternalError(absl::StrCat("fsdpd's log names no metrics port; see ", log_path));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorProcess::Stop(std::chrono::seconds timeout) {
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
      return absl::InternalError(absl::StrCat("fsdpd exited with status ", status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError("fsdpd did not stop within the timeout after SIGTERM");
}

absl::StatusOr<ProcessSample> SampleProcess(pid_t pid) {
  ProcessSample sample;
  std::ifstream status_file(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status_file, line)) {
    if (line.rfind("VmRSS:", 0) == 0) sample.rss_bytes = std::stoll(line.substr(6)) * 1024;
    if (line.rfind("Threads:", 0) == 0) sample.threads = std::stoi(line.substr(8));
  }
  std::ifstream stat_file(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
  const size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || sample.rss_bytes == 0) {
    return absl::NotFoundError(absl::StrCat("cannot read /proc/", pid));
  }
  std::istringstream fields(stat.substr(close_paren + 2));
  std::vector<std::string> values;
  for (std::string value; fields >> value;) values.push_back(value);
  if (values.size() < 13) return absl::InternalError(absl::StrCat("short /proc/", pid, "/stat"));
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  sample.cpu_seconds = (std::stod(values[11]) + std::stod(values[12])) / ticks;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  if (DIR* directory = opendir(tasks.c_str())) {
    while (dirent* entry = readdir(directory)) {
      if (entry->d_name[0] == '.') continue;
      std::ifstream schedstat(absl::StrCat(tasks, "/", entry->d_name, "/schedstat"));
      double running = 0, waiting = 0;
      if (schedstat >> running >> waiting) sample.run_queue_seconds += waiting / 1e9;
    }
    closedir(directory);
  }
  return sample;
}

LatencySummary Summarize(std::vector<double> millis) {
  LatencySummary summary;
  summary.count = millis.size();
  if (millis.empty()) return summary;
  std::sort(millis.begin(), millis.end());
  auto rank = [&](double fraction) {
    const size_t index = static_cast<size_t>(std::ceil(fraction * millis.size()));
    return millis[std::min(millis.size() - 1, index == 0 ? 0 : index - 1)];
  };
  summary.p50 = rank(0.50);
  summary.p99 = rank(0.99);
  summary.max = millis.back();
  return summary;
}

absl::StatusOr<size_t> ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to metrics port ", port, ": ", error));
  }
  const std::string request = absl::StrCat("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:", port,
                                           "\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("sending the /metrics request failed");
  }
  std::string response;
  char buffer[65536];
  for (ssize_t got; (got = recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    response.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  if (response.rfind("HTTP/1.1 200", 0) != 0) {
    return absl::UnavailableError(
        absl::StrCat("/metrics answered: ", response.substr(0, response.find('\r'))));
  }
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? 0 : response.size() - body - 4;
}

absl::StatusOr<StoredSteps> ReadStoredSteps(const std::string& database_path) {
  sqlite3* database = nullptr;
  if (sqlite3_open_v2(database_path.c_str(), &database, SQLITE_OPEN_READONLY, nullptr) !=
      SQLITE_OK) {
    const std::string error = database ? sqlite3_errmsg(database) : "out of memory";
    sqlite3_close(database);
    return absl::NotFoundError(absl::StrCat(database_path, ": ", error));
  }
  StoredSteps stored;
  auto query = [&](const char* sql, auto&& on_row) -> absl::Status {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(database, sql, -1, &statement, nullptr) != SQLITE_OK) {
      return absl::InternalError(absl::StrCat(sql, ": ", sqlite3_errmsg(database)));
    }
    while (sqlite3_step(statement) == SQLITE_ROW) on_row(statement);
    sqlite3_finalize(statement);
    return absl::OkStatus();
  };
  auto text = [](sqlite3_stmt* statement, int column) {
    return std::string(reinterpret_cast<const char*>(sqlite3_column_text(statement, column)));
  };
  absl::Status status = query(
      "SELECT job_id, attempt, rank, COUNT(*) FROM step_reports GROUP BY job_id, attempt, rank",
      [&](sqlite3_stmt* row) {
        stored
            .rank_reports[{text(row, 0), sqlite3_column_int(row, 1), sqlite3_column_int(row, 2)}] =
            sqlite3_column_int64(row, 3);
      });
  if (status.ok()) {
    status = query(
        "SELECT job_id, COUNT(*) FROM step_events GROUP BY job_id",
        [&](sqlite3_stmt* row) { stored.job_events[text(row, 0)] = sqlite3_column_int64(row, 1); });
  }
  sqlite3_close(database);
  if (!status.ok()) return status;
  return stored;
}

}  // namespace fsdpd::bench
