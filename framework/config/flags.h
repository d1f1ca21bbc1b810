// Declared command-line flags: what a model (models::ModelEntry::flags) or a comm hook
// (distributed::CommHookEntry::flags) brings of its own, with its default, help and range. The programs
// (train/options.cpp) show the declared flags in --help, check them as they parse, and refuse a --resume whose
// checked flags changed; the owner reads its values by name (FlagValues).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace minidp {

/// The value of a flag, as the command line spells it: a whole number, several, a number or a word.
enum class FlagKind { Integer, Integers, Number, Text };

/// One command-line flag an owner brings (`--name VALUE`), with its default and help.
struct Flag {
  std::string name;  // without the dashes: "kv-heads"
  FlagKind kind = FlagKind::Integer;
  std::string defaultValue;  // as typed: "4", "256 256", "1e4", "fp32"
  std::string help;
  double min = 1, max = 1e9;         // Integer(s) and Number: the range allowed
  std::vector<std::string> choices;  // Text: the words allowed (empty: any)
  /// A training state records the value and --resume requires the same (false: numerics only, such as
  /// GPT's --residual, which may change between a save and a resume).
  bool checkedOnResume = true;
  /// Number: the range is (min, max], min itself refused.
  bool aboveMin = false;
};

/// The values of an owner's flags by name, each as its canonical text ("256 256", "10000"). On the command
/// line's side only the flags given; where the owner reads them (flagValues) every flag, its defaults overridden
/// by those.
class FlagValues {
 public:
  /// Sets `name` to `value` as the command line spells it (checked against the owner's flag later).
  void set(const std::string& name, const std::string& value) { values_[name] = value; }
  void set(const std::string& name, int64_t value) { values_[name] = std::to_string(value); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  /// The value of an Integer, Integers, Number or Text flag; an error naming --name when it is absent.
  int64_t integer(const std::string& name) const;
  std::vector<int64_t> integers(const std::string& name) const;
  double number(const std::string& name) const;
  const std::string& text(const std::string& name) const;
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::map<std::string, std::string> values_;
};

/// The canonical text of `value` for `flag` (integers and numbers printed back, lists space-separated),
/// or an error saying what the flag takes ("must be an integer in [1, 1e+09], got x").
std::string canonicalFlagValue(const Flag& flag, const std::string& value);
/// The flag of `flags` named `name`; null when there is none.
const Flag* findFlag(const std::vector<Flag>& flags, const std::string& name);
/// Every flag of `flags` (declared by `owner`: "model gpt", "comm hook powersgd"): its default, or the canonical
/// form of `given`'s value. A name in `given` that `flags` does not declare is an error naming the owner.
FlagValues flagValues(const std::string& owner, const std::vector<Flag>& flags, const FlagValues& given);
/// Checks a declaration: no two flags of one name, every default within its own range (errors name `owner`).
void checkFlags(const std::string& owner, const std::vector<Flag>& flags);
/// The checked flags (Flag::checkedOnResume) as " --name value" each, in declaration order: what a state
/// records and --resume compares.
std::string checkedFlagsText(const std::vector<Flag>& flags, const FlagValues& values);

}  // namespace minidp
