// Communicator: the collectives a data-parallel step needs (all-reduce, reduce-scatter, all-gather,
// broadcast), on one of four backends (backends/): single (world 1), MPI (CPU tensors, and CUDA tensors staged
// through pinned host buffers, so several ranks can share a GPU), NCCL (CUDA tensors), and an emulated link.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/stream.h"
#include "framework/distributed/job/work.h"
#include "framework/tensor/tensor.h"

namespace minidp::distributed {

class MpiEnvironment;

/// How a collective combines the ranks' values: their sum, their average (the sum times 1/N, or NCCL's
/// ncclAvg), their maximum or their minimum (ncclMax / ncclMin, MPI_MAX / MPI_MIN). bf16 and fp16 averages
/// pre-multiply each rank's values by 1/N rounded to the type, then sum with one rounding per add, as ncclAvg
/// does on them. Integer sums wrap (two's complement int8, modulo 256 uint8), as NCCL's do; an average needs
/// a floating-point buffer.
enum class ReduceOp { Sum, Avg, Max, Min };
/// "sum", "avg", "max", "min".
const char* reduceOpName(ReduceOp op);

/// `numel` rounded up to a multiple of `world`: a buffer whose shards are equal and contiguous.
int64_t paddedNumel(int64_t numel, int world);
/// For backends: checks a reduction's buffer (any dtype; Avg: a floating-point one; reduce-scatter: numel a
/// multiple of `world`).
void checkReduction(const Tensor& buffer, ReduceOp op, bool scatter, int world);
/// For backends: checks allGather's arguments.
void checkAllGather(const Tensor& input, const Tensor& output, int world);

/// The process group of a data-parallel job: plain collectives, no gradient policy (what travels for a
/// gradient bucket is a comm hook's business, comm_hook.h). Collectives and enqueued tasks run in call
/// order on the communicator's comm stream (CUDA, after the compute stream's work so far) or comm thread
/// (CPU); every rank must issue the same collectives in the same order. Every collective is watched by the
/// watchdog.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  /// "single", "mpi", "nccl" or "emulated".
  virtual std::string name() const = 0;
  /// One line for logs: backend, rank and world, and the backend's settings.
  virtual std::string describe() const = 0;
  /// Whether the backend reduces tensors on `device`.
  virtual bool supports(Device device) const = 0;
  /// Starts reducing `buffer` (F32, F64, BF16, F16, I32, I8 or U8; ReduceOp says which ops take which) in
  /// place over all ranks: every rank ends with the same bits.
  /// `tag` names the collective in timings and watchdog messages.
  virtual std::shared_ptr<Work> allReduce(Tensor buffer, ReduceOp op, const std::string& tag) = 0;
  /// Starts the in-place reduce-scatter of `buffer` (numel a multiple of the world size): this rank's shard,
  /// elements [rank * n / world, (rank + 1) * n / world), ends with the reduction; the rest is unspecified.
  virtual std::shared_ptr<Work> reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) = 0;
  /// Starts the all-gather of `input` (any dtype) into `output`, world x its numel elements of its dtype on
  /// its device: rank r's input lands at [r * n, (r + 1) * n).
  virtual std::shared_ptr<Work> allGather(Tensor input, Tensor output, const std::string& tag) = 0;
  /// Starts the in-place all-gather of equal shards: every rank's shard r (elements [r * n / world,
  /// (r + 1) * n / world)) becomes rank r's. n must be a multiple of the world size.
  virtual std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) = 0;
  /// Runs `task` in order with the collectives: CUDA calls it now with the comm stream, on which it enqueues
  /// its kernels (after the compute stream's work so far); the CPU runs it later on the comm thread with a
  /// null stream. `keep` stays alive until the task ran. The local work between a comm hook's collectives
  /// (casts, PowerSGD's products) goes here, so that it overlaps backward as the collectives do.
  virtual std::shared_ptr<Work> enqueue(const std::string& tag, Tensor keep,
                                        const std::function<void(cudaStream_t)>& task) = 0;
  /// A flat buffer of `numel` elements for collectives to run on (a gradient bucket, a wire copy),
  /// uninitialised. The default is an ordinary tensor; NCCL with --nccl-buffers registered or symmetric
  /// allocates it with ncclMemAlloc and registers it, which is collective for symmetric windows: every rank
  /// allocates the same sizes in the same order. Collectives on it are called as on any tensor.
  virtual Tensor allocateCommBuffer(int64_t numel, DType dtype, Device device) {
    return Tensor::empty({numel}, dtype, device);
  }
  /// Copies rank `root`'s tensor into every rank's tensor; blocking (setup only).
  virtual void broadcast(Tensor& tensor, int root) = 0;
  /// Every rank's `bytes`, indexed by rank; blocking (setup and checks only).
  virtual std::vector<std::string> allGather(const std::string& bytes) = 0;
  /// True on every rank iff `ok` is true on every rank.
  bool allAgree(bool ok);
  /// The failure path: ends the collectives so that no rank waits forever. Under mpirun it ends every
  /// rank of the job and does not return; in a single process it returns.
  virtual void abort() noexcept = 0;
  /// CUDA graphs: collectives captured into a graph are launched by its replays, not by this communicator,
  /// so the watchdog (NCCL) watches each replay instead: call right after enqueuing one; `tag` names it in
  /// a timeout. Backends without a watchdog ignore it.
  virtual void watchReplay(const std::string& tag) { (void)tag; }
};

/// NCCL's CTA policy (ncclConfig_t::CTAPolicy, NCCL 2.27+). Default leaves the field unset (NCCL's default,
/// or its NCCL_CTA_POLICY variable); Efficiency: the fewest CTAs that still reach decent bandwidth; Zero
/// (2.28+): no CTAs wherever NCCL can (copy-engine collectives on symmetric buffers), even at some speed.
enum class NcclCtaPolicy { Default, Efficiency, Zero };
/// Where a communicator's collective buffers (Communicator::allocateCommBuffer) come from. Plain: the
/// caching allocator. Registered: ncclMemAlloc, then ncclCommRegister (zero-copy where NCCL supports it).
/// Symmetric: ncclMemAlloc, then ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC (NCCL 2.27+: its
/// symmetric kernels, and the copy-engine paths of NcclCtaPolicy::Zero).
enum class CommBuffers { Plain, Registered, Symmetric };
/// Name -> policy (--nccl-cta-policy: default, efficiency, zero), and the name of a policy.
const std::map<std::string, NcclCtaPolicy>& ncclCtaPolicies();
const char* ncclCtaPolicyName(NcclCtaPolicy policy);
/// Name -> buffers (--nccl-buffers: plain, registered, symmetric), and the name of a mode.
const std::map<std::string, CommBuffers>& commBuffersModes();
const char* commBuffersName(CommBuffers buffers);

/// How to build the communicator (the command line's --comm, --nccl-max-ctas, ... flags).
struct CommOptions {
  /// auto, single, mpi, nccl or emulated.
  std::string backend = "auto";
  /// Gradients live on the GPU.
  bool cuda = false;
  /// NCCL maxCTAs / minCTAs (0: NCCL's default); maxCTAs is also the emulated link's CTA count.
  int ncclMaxCtas = 0;
  int ncclMinCtas = 0;
  /// NCCL only: the CTA policy and where the collective buffers come from; the defaults change nothing.
  NcclCtaPolicy ncclCtaPolicy = NcclCtaPolicy::Default;
  CommBuffers ncclBuffers = CommBuffers::Plain;
  /// Create the comm stream at the greatest priority, so collectives' CTAs get SMs ahead of backward.
  bool commHighPriority = true;
  /// Emulated link: ranks modelled, bandwidth in GB/s (1e9 bytes/s), latency in us.
  int emulatedWorld = 8;
  double emulatedGBps = 100, emulatedLatencyUs = 10;
  /// The CUDA device (--gpu); -1: the node-local rank modulo the visible devices (launcher.h).
  int gpu = -1;
  /// A collective unfinished for longer than this ends every rank (<= 0: no watchdog).
  double watchdogSeconds = 300;
};

/// One communicator backend: its --comm name, a one-line description for the help, its factory (which checks
/// that the backend fits the world size, naming what does not) and the settings it refuses.
struct CommBackend {
  std::string name;
  std::string description;
  std::function<std::shared_ptr<Communicator>(const CommOptions& opts, MpiEnvironment* env)> make;
  /// The settings of `opts` (the device) the backend cannot serve, as one line; empty when it can, or when
  /// the function is empty. Known from the flags alone: a usage error before any work (commSettingsProblem).
  std::function<std::string(const CommOptions& opts)> refuse;
};

/// The name -> factory table makeCommunicator chooses from: single, mpi, nccl, emulated.
const std::vector<CommBackend>& commBackends();
/// --comm's allowed values: "auto", then every backend's name in table order.
std::vector<std::string> commBackendNames();
/// --comm's help: the table's names with their descriptions, and what auto picks.
std::string commBackendHelp();

/// The backend makeCommunicator builds for `opts` in a world of `world` ranks, `launched` by mpirun (or
/// another launcher): opts.backend, or what auto picks.
std::string resolveCommBackend(const CommOptions& opts, int world, bool launched);
/// The NCCL-only settings of `opts` (--nccl-min-ctas, --nccl-cta-policy, --nccl-buffers, when not their
/// defaults) against each other and the `backend` they would run on, as one line; empty when they fit.
std::string ncclSettingsProblem(const CommOptions& opts, const std::string& backend);

/// The settings of `opts` that `backend` refuses (CommBackend::refuse), then its NCCL-only settings
/// (ncclSettingsProblem), as one line; empty when they fit.
std::string commSettingsProblem(const CommOptions& opts, const std::string& backend);

/// Builds the backend `opts` names. auto: nccl for CUDA under mpirun with a world > 1, mpi for the CPU
/// under mpirun, single otherwise. `env` is null when the process was not started by mpirun; it must
/// outlive the communicator. Settings the backend refuses are an error (commSettingsProblem).
std::shared_ptr<Communicator> makeCommunicator(const CommOptions& opts, MpiEnvironment* env);

}  // namespace minidp::distributed
