#include "worker/comm/mesh_exchange.h"

#include "absl/strings/str_cat.h"

namespace fsdpd {
namespace {

std::string AddressesKey(const MeshExchange& exchange, int rank) {
  return absl::StrCat(exchange.prefix, "mesh/", rank);
}

std::string HostKey(const MeshExchange& exchange, int rank) {
  return absl::StrCat(exchange.prefix, "host/", rank);
}

// Where `rank`'s record sits in `owner`'s list, which leaves the owner out.
int RecordIndex(int owner, int rank) { return rank < owner ? rank : rank - 1; }

}  // namespace

absl::StatusOr<MeshPeers> ExchangeMeshAddresses(KeyValueStore& store,
                                                const MeshExchange& exchange) {
  const int size = exchange.size;
  const int rank = exchange.rank;
  if (size < 2 || rank < 0 || rank >= size || static_cast<int>(exchange.addresses.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat("mesh exchange: rank ", rank, " of ", size,
                                                   " with ", exchange.addresses.size(),
                                                   " addresses"));
  }
  std::string records;
  size_t record_size = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const std::string& address = exchange.addresses[peer];
    if (records.empty()) record_size = address.size();
    if (address.empty() || address.size() != record_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh exchange: rank ", rank, "'s address for rank ", peer, " is ", address.size(),
          " bytes; every address must have the same, non-zero size (", record_size, ")"));
    }
    records += address;
  }
  if (absl::Status status = store.Set(HostKey(exchange, rank), exchange.host); !status.ok()) {
    return status;
  }
  if (absl::Status status = store.Set(AddressesKey(exchange, rank), records); !status.ok()) {
    return status;
  }
  std::vector<KeyPart> keys;
  keys.reserve(2 * static_cast<size_t>(size - 1));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    keys.push_back({AddressesKey(exchange, peer), RecordIndex(peer, rank), size - 1});
    keys.push_back({HostKey(exchange, peer)});
  }
  absl::StatusOr<std::vector<std::string>> values = store.GetMany(keys, exchange.timeout);
  if (!values.ok()) return values.status();
  MeshPeers peers;
  peers.peer_addresses.resize(size);
  size_t next = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    peers.peer_addresses[peer] = std::move((*values)[next]);
    if (peer < rank && (*values)[next + 1] == exchange.host) ++peers.local_rank;
    next += 2;
  }
  return peers;
}

}  // namespace fsdpd
