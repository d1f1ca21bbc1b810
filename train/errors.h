// How the programs' failures reach the user: the exit status of a usage error, the error every rank saw alike
// (AgreedError), and an error's text as the one line a user reads (userMessage).
#pragma once

#include <string>

#include "base/check.h"

namespace minidp::train {

/// Exit status of a usage error (a flag's value or syntax); runtime errors exit 1.
inline constexpr int kUsageExit = 2;

/// A failure every rank saw (the same message on each): every rank exits cleanly with `status`, no abort needed.
class AgreedError : public Error {
 public:
  explicit AgreedError(const std::string& what, int status = 1) : Error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

/// `what` as one line for the user: without the source locations and check conditions the library adds
/// (kept with `verbose`), newlines folded.
std::string userMessage(const std::string& what, bool verbose);

}  // namespace minidp::train
