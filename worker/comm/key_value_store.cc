#include "worker/comm/key_value_store.h"

#include <algorithm>

namespace fsdpd {

absl::StatusOr<std::vector<std::string>> KeyValueStore::GetMany(const std::vector<KeyPart>& keys,
                                                                std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const KeyPart& asked : keys) {
    if (absl::Status malformed = CheckKeyPart(asked); !malformed.ok()) return malformed;
    const auto left =
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    absl::StatusOr<std::string> value = Get(asked.key, left);
    if (!value.ok()) return value.status();
    absl::StatusOr<std::string> part = ValuePart(asked, *value);
    if (!part.ok()) return part.status();
    values.push_back(*std::move(part));
  }
  return values;
}

}  // namespace fsdpd
