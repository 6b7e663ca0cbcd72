#include "client/file_download.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "client/output.h"

namespace fsdpd::client {
namespace {

namespace fs = std::filesystem;

std::string KindName(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory:
      return "a directory: name a file inside it";
    case fs::file_type::fifo:
      return "a FIFO (named pipe); to stream the file, use -o - and a shell pipe";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

// Writes all of `size` bytes to `fd`.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

// Creates (or truncates) `path` as a regular file for writing; -1 with `error` set when it is
// anything else. O_NOFOLLOW and O_NONBLOCK: a link or a FIFO put there is refused, not followed
// or waited on.
int OpenPartial(const std::string& path, std::string* error) {
  struct stat info {};
  if (lstat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    *error = "cannot write " + path + ": it exists and is not a regular file; remove it";
    return -1;
  }
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    return -1;
  }
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    *error = "cannot write " + path + ": not a regular file";
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

std::optional<OutputTarget> ResolveOutputTarget(const std::string& output_path,
                                                std::string* error) {
  OutputTarget target;
  if (output_path == "-") {
    if (isatty(STDOUT_FILENO)) {
      *error = "-o -: stdout is a terminal; redirect it to a file or a pipe";
      return std::nullopt;
    }
    target.to_stdout = true;
    return target;
  }
  std::error_code code;
  const fs::file_status followed = fs::status(output_path, code);  // follows symbolic links
  if (followed.type() == fs::file_type::not_found) {
    if (fs::is_symlink(fs::symlink_status(output_path, code))) {
      *error = "-o " + output_path + ": a symbolic link to a file that does not exist";
      return std::nullopt;
    }
    target.path = output_path;
    return target;
  }
  if (code) {
    *error = "-o " + output_path + ": " + code.message();
    return std::nullopt;
  }
  const fs::path resolved = fs::canonical(output_path, code);
  const std::string shown = code || resolved == fs::path(output_path)
                                ? output_path
                                : output_path + " (" + resolved.string() + ")";
  if (followed.type() != fs::file_type::regular) {
    *error = "-o " + shown + " is " + KindName(followed.type()) +
             "; the output must be a regular file, or - for stdout";
    return std::nullopt;
  }
  target.path = code ? output_path : resolved.string();
  return target;
}

int DownloadFile(grpc::ClientContext* context, grpc::ClientReader<v1::FileChunk>* reader,
                 const ClientOptions& options, const std::string& job_id,
                 const std::string& output_path, const std::string& what) {
  auto refuse = [&](const std::string& message) {
    context->TryCancel();
    reader->Finish();
    return Fail(message);
  };
  std::string error;
  std::optional<OutputTarget> target = ResolveOutputTarget(output_path, &error);
  if (!target) return refuse(error);
  const std::string partial_path = target->to_stdout ? "" : target->path + ".partial";
  const int out = target->to_stdout ? STDOUT_FILENO : OpenPartial(partial_path, &error);
  if (out < 0) return refuse(error);
  // A failed download removes its partial file; on stdout, what was written stays written.
  auto discard = [&](const std::string& message) {
    if (!target->to_stdout) {
      close(out);
      std::remove(partial_path.c_str());
    }
    return Fail(message + (target->to_stdout ? " (stdout holds a torn " + what + ")" : ""));
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
    if (!WriteAll(out, chunk.data().data(), chunk.data().size())) {
      const std::string cause = std::strerror(errno);
      context->TryCancel();
      reader->Finish();
      return discard("writing " + (target->to_stdout ? std::string("stdout") : partial_path) +
                     " failed: " + cause);
    }
    written += static_cast<int64_t>(chunk.data().size());
    total = chunk.total_bytes();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return discard(DescribeError(status, options, job_id));
  if (total >= 0 && written != total) {
    return discard("the " + what + " ended after " + std::to_string(written) + " of " +
                   std::to_string(total) + " bytes");
  }
  if (!target->to_stdout) {
    if (close(out) != 0) {
      std::remove(partial_path.c_str());
      return Fail("writing " + partial_path + " failed: " + std::strerror(errno));
    }
    std::error_code rename_error;
    fs::rename(partial_path, target->path, rename_error);
    if (rename_error) {
      std::remove(partial_path.c_str());
      return Fail("cannot rename " + partial_path + ": " + rename_error.message());
    }
  }

  // With the file on stdout, the outcome goes to stderr.
  std::ostream& report = target->to_stdout ? std::cerr : std::cout;
  if (options.json) {
    report << nlohmann::json{{"id", job_id}, {"path", output_path}, {"bytes", written}}.dump()
           << std::endl;
  } else {
    report << "wrote the " << what << " (" << FormatBytes(written) << ") to "
           << (target->to_stdout ? "stdout" : output_path) << std::endl;
  }
  return 0;
}

}  // namespace fsdpd::client
