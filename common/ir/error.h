// Two error tiers, after Halide's Error.h:
//   UserError      — the user's input (a file, a flag, a message) is wrong. Reported as
//                    one clear line and a non-zero exit; never an abort.
//   InternalError  — a broken invariant inside dc: a bug to report.
// Both carry a streamed message:  throw_user_error("bad axis ", axis, " for rank ", r);
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dc {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct InternalError : std::logic_error {
  using std::logic_error::logic_error;
};

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <class... Args>
[[noreturn]] void throw_user_error(const Args&... args) {
  throw UserError(str_cat(args...));
}

template <class... Args>
[[noreturn]] void throw_internal_error(const Args&... args) {
  throw InternalError(str_cat(args...));
}

}  // namespace dc

// user_check(cond, msg...) : bad input.  internal_check(cond, msg...) : bug in dc.
#define DC_USER_CHECK(cond, ...)                 \
  do {                                           \
    if (!(cond)) ::dc::throw_user_error(__VA_ARGS__); \
  } while (0)

#define DC_INTERNAL_CHECK(cond, ...)                                              \
  do {                                                                            \
    if (!(cond))                                                                  \
      ::dc::throw_internal_error(__FILE__, ":", __LINE__, ": internal error: ",   \
                                 "check '" #cond "' failed: ", __VA_ARGS__);      \
  } while (0)
