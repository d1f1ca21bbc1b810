#include "framework/config/flags.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "base/check.h"

namespace minidp {

namespace {

std::string shortNumber(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

// The shortest text that reads back as v; whole numbers as integers ("10000", not "1e+04").
std::string exactNumber(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  for (int precision = 1;; ++precision) {
    std::ostringstream os;
    os.precision(precision);
    os << v;
    if (precision >= 17 || std::strtod(os.str().c_str(), nullptr) == v) return os.str();
  }
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream is(text);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

// One number of `flag`, checked against its range (and for a whole number when `integer`).
double parseNumber(const Flag& flag, const std::string& word, bool integer) {
  const std::string range = (flag.aboveMin ? "(" : "[") + shortNumber(flag.min) + ", " + shortNumber(flag.max) + "]";
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  const bool parsed = !word.empty() && end != word.c_str() && *end == '\0' && std::isfinite(v);
  MINIDP_CHECK(
      parsed && (!integer || v == std::floor(v)) && (flag.aboveMin ? v > flag.min : v >= flag.min) && v <= flag.max,
      "--" << flag.name << " must be " << (integer ? "an integer" : "a number") << " in " << range << ", got " << word);
  return v;
}

}  // namespace

int64_t FlagValues::integer(const std::string& name) const {
  const std::vector<int64_t> v = integers(name);
  MINIDP_CHECK(v.size() == 1, "--" << name << " holds " << v.size() << " values, not one");
  return v.front();
}

std::vector<int64_t> FlagValues::integers(const std::string& name) const {
  std::vector<int64_t> out;
  for (const std::string& w : words(text(name))) out.push_back(std::stoll(w));
  return out;
}

double FlagValues::number(const std::string& name) const { return std::stod(text(name)); }

const std::string& FlagValues::text(const std::string& name) const {
  const auto it = values_.find(name);
  MINIDP_CHECK(it != values_.end(), "no value for the flag --" << name);
  return it->second;
}

std::string canonicalFlagValue(const Flag& flag, const std::string& value) {
  switch (flag.kind) {
    case FlagKind::Integer:
    case FlagKind::Integers: {
      const std::vector<std::string> items = words(value);
      MINIDP_CHECK(!items.empty() && (flag.kind == FlagKind::Integers || items.size() == 1),
                   "--" << flag.name << " takes " << (flag.kind == FlagKind::Integers ? "integers" : "one integer")
                        << ", got '" << value << "'");
      std::string out;
      for (const std::string& w : items) {
        out += (out.empty() ? "" : " ") + std::to_string(static_cast<int64_t>(parseNumber(flag, w, true)));
      }
      return out;
    }
    case FlagKind::Number: return exactNumber(parseNumber(flag, value, false));
    case FlagKind::Text: {
      const bool allowed =
          flag.choices.empty() || std::find(flag.choices.begin(), flag.choices.end(), value) != flag.choices.end();
      std::string list;
      for (const std::string& c : flag.choices) list += (list.empty() ? "" : ", ") + c;
      MINIDP_CHECK(allowed, "--" << flag.name << " must be one of " << list << ", got " << value);
      return value;
    }
  }
  return value;
}

const Flag* findFlag(const std::vector<Flag>& flags, const std::string& name) {
  for (const Flag& f : flags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

FlagValues flagValues(const std::string& owner, const std::vector<Flag>& flags, const FlagValues& given) {
  for (const auto& [name, value] : given.values()) {
    MINIDP_CHECK(findFlag(flags, name) != nullptr, "--" << name << " is not a flag of " << owner);
  }
  FlagValues out;
  for (const Flag& f : flags) {
    out.set(f.name, canonicalFlagValue(f, given.has(f.name) ? given.text(f.name) : f.defaultValue));
  }
  return out;
}

void checkFlags(const std::string& owner, const std::vector<Flag>& flags) {
  for (size_t i = 0; i < flags.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      MINIDP_CHECK(flags[i].name != flags[j].name, owner << " declares --" << flags[i].name << " twice");
    }
    canonicalFlagValue(flags[i], flags[i].defaultValue);  // a default outside its own range is an error
  }
}

std::string checkedFlagsText(const std::vector<Flag>& flags, const FlagValues& values) {
  std::string text;
  for (const Flag& f : flags) {
    if (f.checkedOnResume) text += " --" + f.name + " " + values.text(f.name);
  }
  return text;
}

}  // namespace minidp
