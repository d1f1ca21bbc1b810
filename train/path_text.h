// A path's text, checked and shown: what is wrong with it as a path (empty, a control character, longer than
// the system takes), for the validators of the file flags (options.h's nonEmptyPath), and the path as a
// message shows it.
#pragma once

#include <string>

namespace minidp::train {

/// What is wrong with `path` as text, for a flag's validator ("needs a path, got an empty string", "holds a
/// newline at byte 3: give a path without control characters", "is 5000 bytes long: the system takes at most
/// 4095"); empty when nothing is.
std::string pathTextProblem(const std::string& path);

/// `path` as a message shows it: control characters escaped (\n), a path longer than 120 bytes cut in its middle.
std::string shownPath(const std::string& path);

}  // namespace minidp::train
