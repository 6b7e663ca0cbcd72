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

// The spec with each of its path fields (SpecPathFields, proto/spec/spec_path_fields.h) resolved
// and confined by ResolveConfinedPath; an empty field stays empty. An error names the field
// ("data.path: path '...' resolves to ...").
absl::StatusOr<v1::JobSpec> ResolveSpecPaths(const v1::JobSpec& spec,
                                             const std::vector<std::string>& allowed_roots);

// Resolves and confines `path` like ResolveConfinedPath, then creates it and its parents.
// Returns the resolved path.
absl::StatusOr<std::string> CreateConfinedDirectory(const std::string& path,
                                                    const std::vector<std::string>& allowed_roots);

}  // namespace fsdpd
