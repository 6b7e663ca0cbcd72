#include "client/job_text.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/output.h"

namespace fsdpd::client {
namespace {

int64_t MillisOf(const google::protobuf::Timestamp& time) {
  return time.seconds() * 1000 + time.nanos() / 1000000;
}

}  // namespace

std::string LabelsText(const v1::Job& job) {
  const std::map<std::string, std::string> sorted(job.labels().begin(), job.labels().end());
  std::vector<std::string> pairs;
  for (const auto& [key, value] : sorted) pairs.push_back(absl::StrCat(key, "=", value));
  return absl::StrJoin(pairs, ", ");
}

std::string OriginText(const v1::JobOrigin& origin) {
  std::vector<std::string> parts;
  if (!origin.resubmitted_from().empty()) {
    std::string part = absl::StrCat("resubmitted from ", origin.resubmitted_from());
    if (origin.overrides_size() > 0) {
      absl::StrAppend(&part, " with ", absl::StrJoin(origin.overrides(), " "));
    }
    parts.push_back(part);
  }
  if (origin.has_weights_from()) {
    parts.push_back(absl::StrCat("weights from ", origin.weights_from().job_id(), " at step ",
                                 origin.weights_from().step()));
  }
  return absl::StrJoin(parts, "; ");
}

std::string AttemptText(const v1::Attempt& attempt) {
  std::vector<std::string> ranks;
  for (const v1::Attempt::Rank& rank : attempt.ranks()) {
    ranks.push_back(absl::StrCat(rank.rank(), ":", rank.worker_id(),
                                 rank.hostname().empty() ? "" : "@" + rank.hostname()));
  }
  std::string text = absl::StrCat("attempt ", attempt.number(), " on ", absl::StrJoin(ranks, " "),
                                  "; ", FormatTime(MillisOf(attempt.start_time())));
  if (attempt.has_end_time()) {
    absl::StrAppend(&text, " to ", FormatTime(MillisOf(attempt.end_time())), ", step ",
                    attempt.final_step(), ": ", attempt.outcome());
  } else {
    absl::StrAppend(&text, ", running");
  }
  return text;
}

std::string Wrap(const std::string& text, size_t width, size_t indent) {
  std::string out;
  std::string line;
  size_t position = 0;
  const std::string pad(indent, ' ');
  while (position < text.size()) {
    const size_t limit = line.empty() && !out.empty() ? width - indent : width;
    const size_t rest = text.size() - position;
    if (rest <= limit) {
      line = text.substr(position);
      position = text.size();
    } else {
      size_t cut = text.rfind(' ', position + limit);
      if (cut == std::string::npos || cut <= position) cut = position + limit;
      line = text.substr(position, cut - position);
      position = cut;
      while (position < text.size() && text[position] == ' ') ++position;
    }
    absl::StrAppend(&out, out.empty() ? "" : pad, line, "\n");
    line.clear();
  }
  if (out.empty()) out = "\n";
  return out;
}

}  // namespace fsdpd::client
