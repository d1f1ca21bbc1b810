#include "train/path_text.h"

#include <limits.h>

#include <algorithm>
#include <cstdio>

namespace minidp::train {

std::string pathTextProblem(const std::string& path) {
  if (path.empty()) return "needs a path, got an empty string";
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      return "the path " + shownPath(path) + " holds " +
             (c == '\n' ? std::string("a newline") : "control character " + std::string(code)) + " at byte " +
             std::to_string(i) + ": give a path without control characters";
    }
  }
  if (path.size() >= PATH_MAX)
    return "the path is " + std::to_string(path.size()) + " bytes long: the system takes at most " +
           std::to_string(PATH_MAX - 1);
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find('/', begin), path.size());
    if (end - begin > NAME_MAX)
      return "the path " + shownPath(path) + " has a name of " + std::to_string(end - begin) +
             " bytes: the system takes at most " + std::to_string(NAME_MAX) + " in one name";
    begin = end + 1;
  }
  return {};
}

std::string shownPath(const std::string& path) {
  std::string shown;
  for (char ch : path) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      shown += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "\\x%02x", c);
      shown += code;
    } else {
      shown += ch;
    }
  }
  constexpr size_t kShown = 120;
  if (shown.size() <= kShown) return shown;
  return shown.substr(0, kShown / 2) + "..." + shown.substr(shown.size() - kShown / 2 + 3);
}

}  // namespace minidp::train
