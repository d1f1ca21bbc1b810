#include "framework/distributed/gradient/comm_hook.h"

#include <algorithm>

namespace minidp::distributed {

// The built-in hooks, one line each: --comm-hook name, help, the factory defined in hooks/<name>.cpp, and the
// runs it refuses (a function beside the factory, or noUsageProblem).
#define MINIDP_BUILTIN_COMM_HOOKS(X)                                                                            \
  X("allreduce", "the bucket averaged as it is (fp32 on the wire)", makeAllReduceHook, noUsageProblem)          \
  X("bf16", "each bucket rounded to bf16, averaged, widened back (PyTorch's bf16_compress_hook)", makeBf16Hook, \
    noUsageProblem)                                                                                             \
  X("powersgd", "rank --powersgd-rank approximations of the 2-D gradients (PyTorch's powerSGD_hook)",           \
    makePowerSgdHook, powerSgdUsageProblem)

#define MINIDP_DECLARE_HOOK_(name, help, factory, refusals)  \
  std::unique_ptr<CommHook> factory(const CommHookOptions&); \
  std::string refusals(const HookUsage&);
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

namespace {

std::vector<CommHookEntry>& table() {
#define MINIDP_HOOK_ENTRY_(name, help, factory, refusals) CommHookEntry{name, help, factory, refusals},
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

std::unique_ptr<CommHook> makeCommHook(const CommHookOptions& opts) { return findCommHook(opts.name).make(opts); }

}  // namespace minidp::distributed
