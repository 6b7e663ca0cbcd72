#include "worker/comm/key_value_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fsdpd {

absl::StatusOr<std::vector<std::string>> KeyValueStore::GetMany(const std::vector<KeyPart>& keys,
                                                                std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const KeyPart& asked : keys) {
    if (asked.parts < 0 || (asked.parts > 0 && (asked.part < 0 || asked.part >= asked.parts))) {
      return absl::InvalidArgumentError(absl::StrCat("key \"", asked.key, "\": part ", asked.part,
                                                     " of ", asked.parts, " does not exist"));
    }
    const auto left =
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    absl::StatusOr<std::string> value = Get(asked.key, left);
    if (!value.ok()) return value.status();
    if (asked.parts == 0) {
      values.push_back(*std::move(value));
      continue;
    }
    if (value->size() % asked.parts != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("key \"", asked.key, "\" holds ", value->size(),
                       " bytes, which do not split into ", asked.parts, " equal parts"));
    }
    const size_t size = value->size() / asked.parts;
    values.push_back(value->substr(size * asked.part, size));
  }
  return values;
}

}  // namespace fsdpd
