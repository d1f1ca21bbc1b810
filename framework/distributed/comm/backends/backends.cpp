// The communicator backends' table: single (world 1, here), mpi, nccl and emulated (each in a file pair of
// its own beside this one), one name -> factory entry each, and the --comm choice among them.
#include "framework/distributed/comm/backends/emulated_communicator.h"
#include "framework/distributed/comm/backends/mpi_communicator.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/runtime/device.h"

#if MINIDP_WITH_CUDA
#include "framework/distributed/comm/backends/nccl_communicator.h"
#endif

namespace minidp::distributed {

namespace {

/// World 1: a reduction over one rank is the identity (sum, average, max and min alike); minidp runs without
/// mpirun. Enqueued tasks run at once, on the compute stream (CUDA) or the calling thread.
class SingleCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  std::string name() const override { return "single"; }
  std::string describe() const override { return "single: one rank, no communication"; }
  bool supports(Device) const override { return true; }
  std::shared_ptr<Work> allReduce(Tensor buffer, ReduceOp op, const std::string& tag) override {
    checkReduction(buffer, op, false, 1);
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
  }
  std::shared_ptr<Work> reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) override {
    checkReduction(buffer, op, true, 1);
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
  }
  std::shared_ptr<Work> allGather(Tensor input, Tensor output, const std::string& tag) override {
    checkAllGather(input, output, 1);
    output.copyFrom(input);
    return std::make_shared<CompletedWork>(tag, input.nbytes());
  }
  std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) override {
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
  }
  std::shared_ptr<Work> enqueue(const std::string& tag, Tensor keep,
                                const std::function<void(cudaStream_t)>& task) override {
    MINIDP_CHECK(keep.defined(), "enqueue '" << tag << "': keep names the tensor the task works on (its device)");
    task(keep.isCuda() ? runtime::computeStream() : nullptr);
    return std::make_shared<CompletedWork>(tag, 0);
  }
  void broadcast(Tensor&, int root) override { MINIDP_CHECK(root == 0, "broadcast from rank " << root << " of 1"); }
  std::vector<std::string> allGather(const std::string& bytes) override { return {bytes}; }
  void abort() noexcept override {}
};

}  // namespace

const std::vector<CommBackend>& commBackends() {
  static const std::vector<CommBackend> table = {
      {"single", "one rank, no communication",
       [](const CommOptions&, MpiEnvironment* env) -> std::shared_ptr<Communicator> {
         const int world = env ? env->worldSize() : 1;
         MINIDP_CHECK(world == 1, "--comm single under mpirun with "
                                      << world << " ranks: the ranks would train apart; use mpi or nccl");
         return std::make_shared<SingleCommunicator>();
       }},
      {"mpi", "MPI collectives of CPU tensors, and of CUDA tensors through pinned host buffers (under mpirun; "
              "several ranks may share one GPU)",
       [](const CommOptions& opts, MpiEnvironment* env) -> std::shared_ptr<Communicator> {
         MINIDP_CHECK(env, "--comm mpi needs the process to be started by mpirun");
         return std::make_shared<MpiCommunicator>(*env, opts.watchdogSeconds, opts.cuda, opts.commHighPriority);
       }},
      {"nccl", "NCCL all-reduce of CUDA tensors (under mpirun)",
       [](const CommOptions& opts, MpiEnvironment* env) -> std::shared_ptr<Communicator> {
#if MINIDP_WITH_CUDA
         return std::make_shared<NcclCommunicator>(opts, env);
#else
         (void)opts;
         (void)env;
         throwError("--comm nccl: minidp was built without CUDA", __FILE__, __LINE__);
#endif
       },
       [](const CommOptions& opts) -> std::string {
         return opts.cuda ? "" : "--comm nccl averages CUDA tensors; use mpi for --device cpu";
       }},
      {"emulated", "a modelled link of --emulated-world ranks inside one process",
       [](const CommOptions& opts, MpiEnvironment* env) -> std::shared_ptr<Communicator> {
         const int world = env ? env->worldSize() : 1;
         MINIDP_CHECK(world == 1, "--comm emulated models a world inside one process; run it without mpirun (got "
                                      << world << " ranks)");
         return std::make_shared<EmulatedCommunicator>(opts.emulatedWorld, opts.emulatedGBps, opts.emulatedLatencyUs,
                                                       opts.cuda, opts.ncclMaxCtas, opts.commHighPriority);
       }},
  };
  return table;
}

std::vector<std::string> commBackendNames() {
  std::vector<std::string> names{"auto"};
  for (const CommBackend& b : commBackends()) names.push_back(b.name);
  return names;
}

std::string commBackendHelp() {
  std::string help = "Communicator: auto (nccl for CUDA under mpirun, mpi for the CPU under mpirun, else single)";
  for (const CommBackend& b : commBackends()) help += "; " + b.name + ": " + b.description;
  return help;
}

std::string resolveCommBackend(const CommOptions& opts, int world, bool launched) {
  if (opts.backend != "auto") return opts.backend;
  if (opts.cuda) return world > 1 ? "nccl" : "single";
  return launched ? "mpi" : "single";
}

std::string commSettingsProblem(const CommOptions& opts, const std::string& backend) {
  for (const CommBackend& b : commBackends()) {
    if (b.name != backend || !b.refuse) continue;
    if (std::string problem = b.refuse(opts); !problem.empty()) return problem;
  }
  return ncclSettingsProblem(opts, backend);
}

std::shared_ptr<Communicator> makeCommunicator(const CommOptions& opts, MpiEnvironment* env) {
  const std::string backend = resolveCommBackend(opts, env ? env->worldSize() : 1, env != nullptr);
  if (const std::string problem = commSettingsProblem(opts, backend); !problem.empty())
    throwError(problem, __FILE__, __LINE__);
  for (const CommBackend& b : commBackends()) {
    if (b.name == backend) return b.make(opts, env);
  }
  std::string names;
  for (const std::string& name : commBackendNames()) names += (names.empty() ? "" : ", ") + name;
  throwError("unknown communicator backend '" + opts.backend + "' (" + names + ")", __FILE__, __LINE__);
}

}  // namespace minidp::distributed
