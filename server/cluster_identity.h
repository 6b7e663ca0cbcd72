// The state folder's identity. A new state folder gets a cluster id (a random UUID, in
// <state-dir>/cluster-id) before its store is created; from then on an empty or missing
// fsdpd.db in it is a lost store, not a new cluster, and the coordinator refuses to start.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace fsdpd::server {

// A random (version 4) UUID.
std::string NewUuid();

// Returns the state folder's cluster id, creating it when the folder is new (no database
// yet) or predates cluster ids (a database without one). FAILED_PRECONDITION naming the file
// when the database is empty or missing in a folder that has a cluster id, or is empty in one
// that has none.
absl::StatusOr<std::string> OpenClusterIdentity(const std::string& state_dir,
                                                const std::string& database_path);

}  // namespace fsdpd::server
