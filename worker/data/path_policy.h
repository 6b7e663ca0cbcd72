// Confining user-supplied paths (data files, init weights, checkpoint directories) to the
// roots an operator allows, so a job spec cannot make a worker read or write elsewhere.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdpd/v1/spec.pb.h"

namespace fsdpd {

// Returns `path` as a canonical absolute path: symlinks of its existing part resolved, `.`
// and `..` removed (the part that does not exist yet, such as a new checkpoint directory, is
// normalised lexically). With a non-empty `allowed_roots` the result must equal a root or lie
// below one (roots are canonicalised the same way); otherwise PERMISSION_DENIED names the
// path, what it resolved to and the roots. Relative paths resolve against the working
// directory. An empty `allowed_roots` allows everything.
absl::StatusOr<std::string> ResolveConfinedPath(const std::string& path,
                                                const std::vector<std::string>& allowed_roots);

// OK when `path` is a regular file after following symlinks, or does not exist (its reader then
// says NOT_FOUND with its role). Anything else (a FIFO, a device, a socket, a directory) is
// INVALID_ARGUMENT naming the path, what it resolves to and its kind: opening a FIFO for reading
// blocks until a writer comes, and a device can block or change state on open, so such a path
// must be refused with stat(2) before anything opens it. Readers still check the descriptor they
// open (formats/mapped_file.h opens with O_NONBLOCK and fstat(2)s), which closes the window
// between this check and their open.
absl::Status CheckRegularFile(const std::string& path);

// The spec with each of its path fields (SpecPathFields, proto/spec/spec_path_fields.h) resolved
// and confined by ResolveConfinedPath, and refused by CheckRegularFile when it is not a regular
// file (data.path may also be a folder of token shards, whose shards the data loader confines
// one by one); an empty field stays empty. An error names the field ("data.path: path '...'
// resolves to ...").
absl::StatusOr<v1::JobSpec> ResolveSpecPaths(const v1::JobSpec& spec,
                                             const std::vector<std::string>& allowed_roots);

// Resolves and confines `path` like ResolveConfinedPath, then creates it and its parents.
// Returns the resolved path. A directory that cannot be created (a read-only or full file system,
// a root without permission) is UNAVAILABLE: the fault of the worker's storage, not of the job,
// so the attempt is worth retrying on another worker.
absl::StatusOr<std::string> CreateConfinedDirectory(const std::string& path,
                                                    const std::vector<std::string>& allowed_roots);

}  // namespace fsdpd
