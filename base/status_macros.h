// Early returns for absl::Status and absl::StatusOr, shared by the worker's code.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FSDPD_RETURN_IF_ERROR(expression)                                 \
  do {                                                                    \
    if (absl::Status fsdpd_status_ = (expression); !fsdpd_status_.ok()) { \
      return fsdpd_status_;                                               \
    }                                                                     \
  } while (false)

#define FSDPD_STATUS_CONCAT_INNER(a, b) a##b
#define FSDPD_STATUS_CONCAT(a, b) FSDPD_STATUS_CONCAT_INNER(a, b)

// FSDPD_ASSIGN_OR_RETURN(auto value, Function()); FSDPD_ASSIGN_OR_RETURN(existing, ...).
#define FSDPD_ASSIGN_OR_RETURN(declaration, expression)                                    \
  FSDPD_ASSIGN_OR_RETURN_IMPL(FSDPD_STATUS_CONCAT(fsdpd_statusor_, __LINE__), declaration, \
                              expression)
#define FSDPD_ASSIGN_OR_RETURN_IMPL(statusor, declaration, expression) \
  auto statusor = (expression);                                        \
  if (!statusor.ok()) return statusor.status();                        \
  declaration = std::move(*statusor)
