// error_of(f): the message of the mxrl::Error that f() throws, or "" when it
// throws none (any other exception escapes and fails the test).
#pragma once
#include <string>
#include <utility>

#include "util/error.h"

namespace mxrl::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace mxrl::test
