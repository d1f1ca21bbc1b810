#include "train/repeated_flags.h"

#include <map>

namespace minidp::train {

std::string repeatedFlagProblem(const CLI::App& app, int argc, char** argv) {
  std::map<const CLI::Option*, int> seen;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string name = arg.substr(0, arg.find('='));
    const CLI::Option* option = app.get_option_no_throw(name);
    if (option == nullptr || ++seen[option] < 2) continue;
    const int most = option->get_items_expected_max();
    return name + " is given twice: give each flag once" +
           (most > 1 ? " (its values after one " + name + ", separated by spaces)" : "");
  }
  return {};
}

}  // namespace minidp::train
