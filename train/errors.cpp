#include "train/errors.h"

#include <regex>

namespace minidp::train {

namespace {

/// Drops the " [condition]" MINIDP_CHECK appends at the end of `text`.
std::string withoutCondition(std::string text) {
  if (text.empty() || text.back() != ']') return text;
  int depth = 0;
  for (size_t i = text.size(); i-- > 0;) {
    if (text[i] == ']') ++depth;
    if (text[i] == '[' && --depth == 0) {
      return i > 0 && text[i - 1] == ' ' ? text.substr(0, i - 1) : text;
    }
  }
  return text;
}

/// Drops every "some/file.cpp:123: " location prefix.
std::string withoutLocations(const std::string& text) {
  static const std::regex location("[^\\s:]+\\.(cpp|cu|cuh|h|hpp):[0-9]+: ");
  return std::regex_replace(text, location, "");
}

}  // namespace

std::string userMessage(const std::string& what, bool verbose) {
  std::string text = verbose ? what : withoutLocations(withoutCondition(what));
  for (size_t i; (i = text.find('\n')) != std::string::npos;) {
    text.replace(i, 1, i + 1 == text.size() ? "" : "; ");
  }
  return text;
}

}  // namespace minidp::train
