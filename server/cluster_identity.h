// The state folder's identity. A state folder gets a cluster id (a random UUID, in
// <state-dir>/cluster-id) when its store is first opened; from then on an empty or missing
// fsdpd.db in it is a lost store, not a new cluster, and the coordinator refuses to start.
// The id is read and checked before the store is opened, and a new one is written only after
// the store has opened, so a start that fails leaves the folder as it found it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fsdpd::server {

// A random (version 4) UUID.
std::string NewUuid();

// Whether `text` is a UUID as NewUuid writes it (8-4-4-4-12 hexadecimal digits, either case).
bool IsClusterId(absl::string_view text);

struct ClusterIdentity {
  std::string id;
  bool is_new = false;            // not stored yet: WriteClusterIdentity stores it
  bool database_existed = false;  // a store from before cluster ids, when is_new
};

// Reads and checks the state folder's cluster id, writing nothing: a new id (is_new) when the
// folder has no cluster-id file and no database, or a non-empty database from before cluster
// ids. FAILED_PRECONDITION naming the file when the cluster-id file is not a regular file or
// does not hold exactly one UUID, when the database is empty or missing in a folder that has a
// cluster id, or is empty in one that has none.
absl::StatusOr<ClusterIdentity> ReadClusterIdentity(const std::string& state_dir,
                                                    const std::string& database_path);

// Stores a new id durably (temp file, fsync, rename); nothing when the id was already stored.
// The coordinator calls it once the store has opened and loaded.
absl::Status WriteClusterIdentity(const std::string& state_dir, const ClusterIdentity& identity);

// ReadClusterIdentity, then WriteClusterIdentity: for a caller with no store to open between.
absl::StatusOr<std::string> OpenClusterIdentity(const std::string& state_dir,
                                                const std::string& database_path);

}  // namespace fsdpd::server
