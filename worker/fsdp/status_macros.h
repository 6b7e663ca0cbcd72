// Early returns for absl::Status and absl::StatusOr in the engine's code.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ENGINE_RETURN_IF_ERROR(expression)                                  \
  do {                                                                      \
    if (absl::Status engine_status_ = (expression); !engine_status_.ok()) { \
      return engine_status_;                                                \
    }                                                                       \
  } while (false)

#define ENGINE_STATUS_CONCAT_INNER(a, b) a##b
#define ENGINE_STATUS_CONCAT(a, b) ENGINE_STATUS_CONCAT_INNER(a, b)

// ENGINE_ASSIGN_OR_RETURN(auto value, Function()); ENGINE_ASSIGN_OR_RETURN(existing, ...).
#define ENGINE_ASSIGN_OR_RETURN(declaration, expression)                                      \
  ENGINE_ASSIGN_OR_RETURN_IMPL(ENGINE_STATUS_CONCAT(engine_statusor_, __LINE__), declaration, \
                               expression)
#define ENGINE_ASSIGN_OR_RETURN_IMPL(statusor, declaration, expression) \
  auto statusor = (expression);                                         \
  if (!statusor.ok()) return statusor.status();                         \
  declaration = std::move(*statusor)
