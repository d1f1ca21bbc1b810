// Comm hooks: what a gradient bucket becomes on the wire (PyTorch's register_comm_hook). The reducer owns
// the gradient path (grad-ready hook -> bucket complete -> launch in bucket order -> finalize's waits); for
// each bucket it calls the hook, which issues the collectives, and the local work between them, on the
// communicator and returns the pending work. Built-in hooks (hooks/): allreduce (the bucket as it is),
// bf16 (PyTorch's bf16_compress_hook), powersgd (PyTorch's powerSGD_hook), and rows (a row-sparse
// embedding gradient, wrapping another hook for the other buckets). A user's hook registers a factory under
// a name (registerCommHook) and is chosen with --comm-hook like the built-in ones. A hook declares its own
// flags (CommHookEntry::flags, config/flags.h), as a model does: the programs show them in --help, check their
// ranges, and refuse a --resume where a checked one changed; the factory reads their values by name.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/config/flags.h"
#include "framework/distributed/comm/communicator.h"
#include "framework/nn/state_check.h"

namespace minidp::distributed {

/// What a bucket's reduction must leave in it.
enum class Reduction {
  /// Every element holds the average over the ranks (DDP).
  AllReduce,
  /// Only this rank's shard, elements [rank * n / world, (rank + 1) * n / world), holds the average; the
  /// rest of the bucket is unspecified (ZeRO-1). n is a multiple of the world size.
  ReduceScatter,
};

/// One parameter's gradient inside a bucket.
struct BucketEntry {
  int param = 0;       // registration index
  std::string name;    // the parameter's name
  int64_t offset = 0;  // first element in the bucket's buffer
  Shape shape;         // the gradient's shape
  int64_t numel() const { return shapeNumel(shape); }
};

/// A bucket as a hook sees it.
struct GradBucket {
  size_t index = 0;
  /// Flat gradients (F32 or F64, on the parameters' device; padded with zeros to a multiple of the world
  /// size under reduce-scatter). The parameters' gradients are views into it.
  Tensor buffer;
  /// Its parameters, in bucket order.
  std::vector<BucketEntry> entries;
  Reduction reduction = Reduction::AllReduce;
};

/// What reducing one bucket puts on the link: --bucket-mb auto's model costs it collectives x the link's latency
/// + bytes / its bandwidth (framework/distributed/gradient/bucket_model.h).
struct WireCost {
  int collectives = 1;
  double bytes = 0;
};

/// A hook's checkpoint state: named tensors (host or device).
using HookState = std::vector<std::pair<std::string, Tensor>>;

/// What a bucket becomes on the wire. The reducer calls reduce() for every bucket of a synced step, strictly
/// in bucket order, on the thread that runs backward, as soon as the bucket's gradients are enqueued; the
/// hook issues collectives and local work (Communicator::enqueue) on the communicator, so they run on the
/// comm stream (thread) beside backward. Two promises: every rank ends the step with the same bits in the
/// bucket, and the result does not depend on when reduce() is called (overlap on and off agree).
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Its --comm-hook name.
  virtual std::string name() const = 0;
  /// The dtype its collectives send gradients of dtype `grad` in (bf16 for bf16's fp32 buckets): what a
  /// wrapping hook (rows) packs its own values in, and what --bucket-mb auto weighs a bucket's bytes by.
  virtual DType wireDType(DType grad) const { return grad; }
  /// What reducing a bucket of gradients of these shapes (dtype `grad`) over `world` ranks puts on the link once
  /// the hook is past its first steps, for --bucket-mb auto, whose link is timed on all-reduces: a collective
  /// that is not one is stated as the bytes of an all-reduce that moves as much. Default: one collective of the
  /// gradients in wireDType(grad).
  virtual WireCost wireCost(const std::vector<Shape>& shapes, DType grad, int world) const;
  /// The reducer's plan (construction, rebuild): per-bucket buffers are allocated here, once per plan, and
  /// live as long as the hook (a comm stream never reads memory the allocator reused). A hook that cannot
  /// serve `buckets` (a reduction it does not do) throws, naming what.
  virtual void setup(const std::vector<GradBucket>& buckets, Communicator& comm) {
    (void)buckets;
    (void)comm;
  }
  /// A step starts (Reducer::prepareStep): the buckets were zeroed.
  virtual void beginStep() {}
  /// Starts reducing `bucket` as its `reduction` says; the returned work's completion (Work::wait) leaves
  /// the result in bucket.buffer.
  virtual std::shared_ptr<Work> reduce(const GradBucket& bucket, Communicator& comm) = 0;
  /// The step's reductions were waited for (after finalize): per-step counters advance here.
  virtual void endStep() {}
  /// The state a checkpoint keeps (error feedback, warm-start matrices, step), on rank 0; a collective
  /// (per-rank state is gathered), every rank calls it. Empty for a stateless hook.
  virtual HookState checkpointState(Communicator& comm) {
    (void)comm;
    return {};
  }
  /// What checkpointState writes, as a checkpoint must hold it (after setup): each tensor's name, dtypes, shape
  /// and value rules for `world` ranks when the saving run had taken `steps` steps. The loader checks a file
  /// against it before restoreState sees any of it: a tensor missing, malformed or not in it refuses the file.
  /// Empty (the default) for a stateless hook.
  virtual std::vector<nn::StateRule> stateSchema(int world, int64_t steps) const {
    (void)world;
    (void)steps;
    return {};
  }
  /// Restores what checkpointState wrote: `find(name)` returns the saved tensor (host) or an undefined one
  /// when the file holds none; every rank calls it.
  virtual void restoreState(const std::function<Tensor(const std::string&)>& find, Communicator& comm) {
    (void)find;
    (void)comm;
  }
};

/// The hook a run uses (--comm-hook) and its flags.
struct CommHookOptions {
  /// allreduce, bf16, powersgd, or a registered hook's name.
  std::string name = "allreduce";
  /// The hook's flags (CommHookEntry::flags) that were given; the others take their defaults. The factory
  /// receives every flag (makeCommHook fills in the defaults).
  FlagValues flags;
};

/// What a program knows of a run when it checks its flags, before any rank starts (so not the world size:
/// a hook that depends on it refuses in setup()).
struct HookUsage {
  /// ZeRO stage (--zero): 1 reduce-scatters the buckets (Reduction::ReduceScatter).
  int zeroStage = 0;
  /// --cuda-graph: one captured step replayed, so choices the host makes per step are not replayed.
  bool cudaGraph = false;
  /// The gradients' dtype: F32, or F64 (--dtype fp64; --dtype bf16 keeps fp32 parameters and gradients).
  DType gradDType = DType::F32;
  /// Where the gradients live.
  Device device = Device::CPU;
  /// --sparse-embedding-grad: one parameter's bucket goes by rows (hooks/row_sparse.h), the rest to the hook.
  bool rowSparse = false;
};

/// One hook: its name, a one-line description for --help, its factory, the runs it refuses, and its flags.
struct CommHookEntry {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<CommHook>(const CommHookOptions&)> make;
  /// A run the hook cannot serve, as one line naming the flags; empty when it can. Checked with the other
  /// flags, before any work (a usage error). Default: none refused.
  std::function<std::string(const HookUsage&)> usageProblem;
  /// Its own command-line flags, in the order --help lists them ("powersgd-rank"); given with another hook,
  /// one is a usage error.
  std::vector<Flag> flags;
};

/// Adds a hook to the table --comm-hook chooses from (a user's hook, before the flags are parsed), filling
/// an empty usageProblem with the default; a name already taken is an error.
void registerCommHook(CommHookEntry entry);
/// The table: the built-in hooks, then the registered ones.
const std::vector<CommHookEntry>& commHooks();
/// The entry of `name`; an unknown name is an error listing the known ones.
const CommHookEntry& findCommHook(const std::string& name);
/// --comm-hook's allowed values and help.
std::vector<std::string> commHookNames();
std::string commHookHelp();
/// Builds the hook `opts.name` names, with every flag of its entry (the defaults of those not given); an unknown
/// name, or a flag the hook does not declare, is an error.
std::unique_ptr<CommHook> makeCommHook(const CommHookOptions& opts);
/// What a saved hook state must match to continue exactly: the name, then its flags checked on resume
/// (Flag::checkedOnResume) with their values ("powersgd --powersgd-rank 4 ...").
std::string commHookSignature(const CommHookOptions& opts);

}  // namespace minidp::distributed
