// The one error type and check macro of minidp; CUDA, cuBLAS, NCCL and MPI checks derive from it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace minidp {

/// Every failure minidp reports: the message carries the failed statement, file and line.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Builds the message "file:line: what" and throws minidp::Error.
[[noreturn]] inline void throwError(const std::string& what, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": " << what;
  throw Error(os.str());
}

}  // namespace minidp

/// Throws minidp::Error with a streamed message when `cond` is false.
#define MINIDP_CHECK(cond, msg)                                                          \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::ostringstream minidp_check_os_;                                               \
      minidp_check_os_ << msg;                                                           \
      ::minidp::throwError(minidp_check_os_.str() + " [" #cond "]", __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)

/// Checks a library call whose status is `ok` when equal to `success`; `describe(status)` names it.
#define MINIDP_CHECK_STATUS(call, success, describe)                                                         \
  do {                                                                                                       \
    auto minidp_status_ = (call);                                                                            \
    if (minidp_status_ != (success)) {                                                                       \
      ::minidp::throwError(std::string(#call) + " failed: " + describe(minidp_status_), __FILE__, __LINE__); \
    }                                                                                                        \
  } while (0)
