// One rank's side of a full-mesh address exchange through a KeyValueStore, in three calls
// whatever the number of ranks: two sets and one read of every peer.
//
// Each rank keeps one address per peer (Gloo's TCP pairs each listen under their own
// sequence number). Gloo's own full-mesh connect stores a rank's n−1 addresses under one key
// and has every peer read the whole list: n² calls and n³ records for a mesh of n ranks, which
// at 256 ranks was 98,000 calls to the coordinator (bench/RESULTS.md, "Gang scheduling and
// rendezvous"). Here rank r stores its list once, as n−1 records of one size in rank order
// with itself left out, and its host name once; then it reads, in one GetMany, its own record
// of every peer's list (KeyValueStore's parts) and every peer's host name.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

struct MeshExchange {
  std::string prefix;  // put before every key, e.g. "gloo/"
  int rank = 0;
  int size = 0;
  std::string host;  // this rank's host name
  // addresses[peer]: this rank's address for that peer, every one of the same size;
  // addresses[rank] is not used.
  std::vector<std::string> addresses;
  std::chrono::milliseconds timeout{0};
};

struct MeshPeers {
  // peer_addresses[peer]: the address that peer keeps for this rank; empty for this rank.
  std::vector<std::string> peer_addresses;
  // How many lower ranks share this rank's host name (Gloo's local rank).
  int local_rank = 0;
};

// INVALID_ARGUMENT for addresses of differing sizes or the wrong count; the store's error,
// naming the key, when a peer does not publish within the timeout.
absl::StatusOr<MeshPeers> ExchangeMeshAddresses(KeyValueStore& store, const MeshExchange& exchange);

}  // namespace fsdpd
