// How fsdpctl words a job's labels, origin and attempts for a person (status and describe), and
// the line wrapping describe's 80-column page uses.
#pragma once

#include <string>

#include "fsdpd/v1/jobs.pb.h"

namespace fsdpd::client {

// "sweep=lr, team=nlp" (sorted by key); "" without labels.
std::string LabelsText(const v1::Job& job);
// "resubmitted from job-000001 with train.lr=1e-4; weights from job-000001 at step 200";
// "" for a job submitted from a spec alone.
std::string OriginText(const v1::JobOrigin& origin);
// "attempt 2: worker-b on host-1 (rank 0); 12:03:07 to 12:05:10, step 40: <outcome>".
std::string AttemptText(const v1::Attempt& attempt);
// `text` wrapped at `width` columns (at spaces where it can), each line after the first indented
// by `indent` spaces; ends with a newline.
std::string Wrap(const std::string& text, size_t width = 80, size_t indent = 4);

}  // namespace fsdpd::client
