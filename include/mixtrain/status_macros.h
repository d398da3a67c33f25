// mixtrain public API: two conveniences for code calling an absl::Status API (the mixtrain CLI
// uses them; embedders may, or use their own).
#pragma once

#include <utility>

#include "absl/status/status.h"

// Returns the status from the enclosing function if `expr` (an absl::Status) is not OK.
#define MIXTRAIN_RETURN_IF_ERROR(expr)                 \
  do {                                                 \
    ::absl::Status mixtrain_status_ = (expr);          \
    if (!mixtrain_status_.ok()) return mixtrain_status_; \
  } while (0)

// MIXTRAIN_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status if MakeX() failed.
#define MIXTRAIN_ASSIGN_OR_RETURN(lhs, expr) \
  MIXTRAIN_ASSIGN_OR_RETURN_IMPL_(MIXTRAIN_CONCAT_(mixtrain_statusor_, __LINE__), lhs, expr)
#define MIXTRAIN_CONCAT_INNER_(a, b) a##b
#define MIXTRAIN_CONCAT_(a, b) MIXTRAIN_CONCAT_INNER_(a, b)
#define MIXTRAIN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
