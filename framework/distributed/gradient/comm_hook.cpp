#include "framework/distributed/gradient/comm_hook.h"

#include <algorithm>

namespace minidp::distributed {

// The built-in hooks, one line each: --comm-hook name, help, the factory defined in hooks/<name>.cpp, the runs
// it refuses (a function beside the factory, or noUsageProblem) and its flags (a function beside the factory
// returning them, or noFlags).
#define MINIDP_BUILTIN_COMM_HOOKS(X)                                                                            \
  X("allreduce", "the bucket averaged as it is (fp32 on the wire)", makeAllReduceHook, noUsageProblem, noFlags)   \
  X("bf16", "each bucket rounded to bf16, averaged, widened back (PyTorch's bf16_compress_hook)", makeBf16Hook, \
    noUsageProblem, noFlags)                                                                                    \
  X("powersgd", "rank --powersgd-rank approximations of the 2-D gradients (PyTorch's powerSGD_hook)",           \
    makePowerSgdHook, powerSgdUsageProblem, powerSgdFlags)

#define MINIDP_DECLARE_HOOK_(name, help, factory, refusals, flags) \
  std::unique_ptr<CommHook> factory(const CommHookOptions&);       \
  std::string refusals(const HookUsage&);                          \
  std::vector<Flag> flags();
MINIDP_BUILTIN_COMM_HOOKS(MINIDP_DECLARE_HOOK_)
#undef MINIDP_DECLARE_HOOK_

WireCost CommHook::wireCost(const std::vector<Shape>& shapes, DType grad, int world) const {
  (void)world;
  int64_t numel = 0;
  for (const Shape& shape : shapes) numel += shapeNumel(shape);
  return {1, static_cast<double>(numel) * static_cast<double>(dtypeSize(wireDType(grad)))};
}

/// CommHookEntry::usageProblem's default: every run served.
std::string noUsageProblem(const HookUsage&) { return {}; }
/// CommHookEntry::flags of a hook without flags.
std::vector<Flag> noFlags() { return {}; }

namespace {

std::vector<CommHookEntry>& table() {
#define MINIDP_HOOK_ENTRY_(name, help, factory, refusals, flags) CommHookEntry{name, help, factory, refusals, flags()},
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
  if (!entry.usageProblem) entry.usageProblem = noUsageProblem;
  checkFlags("comm hook " + entry.name, entry.flags);
  for (const Flag& flag : entry.flags) {  // one --name for one hook: the programs register every hook's flags
    for (const CommHookEntry& other : hooks) {
      MINIDP_CHECK(!findFlag(other.flags, flag.name), "registerCommHook: --" << flag.name << " is a flag of comm hook "
                                                                             << other.name << " already");
    }
  }
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

const CommHookEntry& findCommHook(const std::string& name) {
  for (const CommHookEntry& h : commHooks()) {
    if (h.name == name) return h;
  }
  std::string names;
  for (const std::string& known : commHookNames()) names += (names.empty() ? "" : ", ") + known;
  throwError("unknown comm hook '" + name + "' (" + names + ")", __FILE__, __LINE__);
}

std::unique_ptr<CommHook> makeCommHook(const CommHookOptions& opts) {
  const CommHookEntry& entry = findCommHook(opts.name);
  return entry.make({opts.name, flagValues("comm hook " + opts.name, entry.flags, opts.flags)});
}

std::string commHookSignature(const CommHookOptions& opts) {
  const CommHookEntry& entry = findCommHook(opts.name);
  return opts.name + checkedFlagsText(entry.flags, flagValues("comm hook " + opts.name, entry.flags, opts.flags));
}

}  // namespace minidp::distributed
