#include "framework/distributed/comm_hook.h"

#include <algorithm>

namespace minidp::distributed {

// The built-in hooks, one line each: --comm-hook name, help, and the factory defined in hooks/<name>.cpp.
#define MINIDP_BUILTIN_COMM_HOOKS(X)                                                                              \
  X("allreduce", "the bucket averaged as it is (fp32 on the wire)", makeAllReduceHook)                          \
  X("bf16", "each bucket rounded to bf16, averaged, widened back (PyTorch's bf16_compress_hook)", makeBf16Hook) \
  X("powersgd", "rank --powersgd-rank approximations of the 2-D gradients (PyTorch's powerSGD_hook)", makePowerSgdHook)

#define MINIDP_DECLARE_HOOK_(name, help, factory) std::unique_ptr<CommHook> factory(const CommHookOptions&);
MINIDP_BUILTIN_COMM_HOOKS(MINIDP_DECLARE_HOOK_)
#undef MINIDP_DECLARE_HOOK_

namespace {

std::vector<CommHookEntry>& table() {
#define MINIDP_HOOK_ENTRY_(name, help, factory) CommHookEntry{name, help, factory},
  static std::vector<CommHookEntry> hooks = {MINIDP_BUILTIN_COMM_HOOKS(MINIDP_HOOK_ENTRY_)};
#undef MINIDP_HOOK_ENTRY_
  return hooks;
}

}  // namespace

void registerCommHook(CommHookEntry entry) {
  MINIDP_CHECK(!entry.name.empty() && entry.make, "registerCommHook: a hook needs a name and a factory");
  std::vector<CommHookEntry>& hooks = table();
  MINIDP_CHECK(std::none_of(hooks.begin(), hooks.end(), [&](const auto& h) { return h.name == entry.name; }),
               "registerCommHook: a comm hook named '" << entry.name << "' exists already");
  hooks.push_back(std::move(entry));
}

const std::vector<CommHookEntry>& commHooks() { return table(); }

std::vector<std::string> commHookNames() {
  std::vector<std::string> names;
  for (const CommHookEntry& h : commHooks()) names.push_back(h.name);
  return names;
}

std::string commHookHelp() {
  std::string help = "What a gradient bucket becomes on the wire";
  for (const CommHookEntry& h : commHooks()) help += "; " + h.name + ": " + h.description;
  return help;
}

std::unique_ptr<CommHook> makeCommHook(const CommHookOptions& opts) {
  for (const CommHookEntry& h : commHooks()) {
    if (h.name == opts.name) return h.make(opts);
  }
  std::string names;
  for (const std::string& name : commHookNames()) names += (names.empty() ? "" : ", ") + name;
  throwError("unknown comm hook '" + opts.name + "' (" + names + ")", __FILE__, __LINE__);
}

}  // namespace minidp::distributed
