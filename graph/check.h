// Internal invariants abort with file and line; user errors are absl::Status (docs/architecture.md).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mixtrain::internal {

// Streams a message, then aborts in its destructor: MT_CHECK(x) << "why";
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    os_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", os_.str().c_str());
    std::fflush(stderr);
    std::abort();
  }
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

}  // namespace mixtrain::internal

#define MT_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::mixtrain::internal::CheckFailure(__FILE__, __LINE__, #cond)

#define MT_CHECK_OK(expr)                                                            \
  do {                                                                               \
    const ::absl::Status _mt_st = (expr);                                            \
    MT_CHECK(_mt_st.ok()) << _mt_st.ToString();                                      \
  } while (0)

#define MT_CONCAT_INNER(a, b) a##b
#define MT_CONCAT(a, b) MT_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define MT_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::absl::Status _mt_status = (expr);          \
    if (!_mt_status.ok()) return _mt_status;     \
  } while (0)

// MT_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status if MakeX() failed.
#define MT_ASSIGN_OR_RETURN(lhs, expr) \
  MT_ASSIGN_OR_RETURN_IMPL(MT_CONCAT(_mt_statusor_, __LINE__), lhs, expr)
#define MT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
