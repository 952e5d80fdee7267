// How every dc command-line tool turns exceptions into its exit code and one stderr line:
// bad input (UserError, a Boost.Program_options error, out of memory) -> 2, "error: ...";
// a bug in dc (InternalError or anything else) -> 3. Header-only so that common/ does not
// link Boost; only tools that parse with Boost.Program_options include it.
#pragma once

#include <iostream>
#include <new>

#include <boost/program_options/errors.hpp>

#include "ir/error.h"

namespace dc {

inline constexpr int kExitUsage = 2;     // bad input: usage, file, model, flag
inline constexpr int kExitInternal = 3;  // a bug in dc

template <class Body>
int run_guarded(Body&& body) {
  try {
    return body();
  } catch (const UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const boost::program_options::error& e) {
    std::cerr << "error: " << e.what() << " (see --help)\n";
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory\n";
    return kExitUsage;
  } catch (const std::exception& e) {  // InternalError and anything unexpected
    std::cerr << "internal error (a bug in dc, please report): " << e.what() << "\n";
    return kExitInternal;
  }
}

}  // namespace dc
