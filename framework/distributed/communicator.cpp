#include "framework/distributed/communicator.h"

#include <sstream>

#include "framework/distributed/emulated_communicator.h"
#include "framework/distributed/mpi_communicator.h"
#include "framework/distributed/mpi_environment.h"
#include "framework/ops/dispatch.h"
#include "kernels/bf16_cast.h"

#if MINIDP_WITH_CUDA
#include "framework/distributed/nccl_communicator.h"
#endif

namespace minidp::distributed {

CompletedWork::CompletedWork(std::string tag, size_t bytes) : Work(std::move(tag), bytes), launchedMs_(hostNowMs()) {}

WorkTiming CompletedWork::timing(cudaEvent_t reference) const {
  WorkTiming t;
  t.launchedMs = launchedMs_;
  // On the host the collective took no time; on the GPU there is no event to place it.
  if (!reference) t.startedMs = t.finishedMs = launchedMs_;
  return t;
}

int64_t paddedNumel(int64_t numel, int world) { return (numel + world - 1) / world * world; }

void checkGradientBucket(const Tensor& buffer, const Tensor& wire, Reduction reduction, int world) {
  MINIDP_CHECK(buffer.defined() && buffer.dtype() != DType::I32, "gradient bucket must be a float tensor");
  MINIDP_CHECK(reduction == Reduction::AllReduce || buffer.numel() % world == 0,
               "reduce-scatter of " << buffer.numel() << " elements over " << world << " ranks: pad the bucket");
  if (!wire.defined()) return;
  MINIDP_CHECK(buffer.dtype() == DType::F32 && wire.dtype() == DType::BF16 && wire.numel() == buffer.numel() &&
                   wire.device() == buffer.device(),
               "bf16 on the wire needs an F32 bucket and a BF16 wire buffer of its size on its device");
}

void roundTripBf16(Tensor& buffer, Tensor& wire) {
  const int64_t n = buffer.numel();
  MINIDP_LAUNCH(buffer, castToBf16, buffer.data<float>(), wire.data<bf16>(), n);
  MINIDP_LAUNCH(buffer, castFromBf16, wire.data<bf16>(), buffer.data<float>(), n);
}

std::shared_ptr<Work> Communicator::reduceGradients(Tensor buffer, Tensor wire, Reduction reduction,
                                                    const std::string& tag, const AfterReduce& after) {
  MINIDP_CHECK(!wire.defined() && reduction == Reduction::AllReduce && !after,
               "communicator " << name() << " does not reduce-scatter, send bf16 or run code after a reduction");
  return allReduceAverage(std::move(buffer), tag);
}

std::shared_ptr<Work> Communicator::allGatherShards(Tensor, const std::string&) {
  throwError("communicator " + name() + " does not all-gather shards (ZeRO-1)", __FILE__, __LINE__);
}

std::shared_ptr<Work> Communicator::allGatherInto(Tensor, Tensor, const std::string&, const AfterReduce&) {
  throwError("communicator " + name() + " does not all-gather tensors (--sparse-embedding-grad's rows)", __FILE__,
             __LINE__);
}

void checkAllGather(const Tensor& input, const Tensor& output, int world) {
  MINIDP_CHECK(input.defined() && output.defined() && input.dtype() == output.dtype() &&
                   input.device() == output.device() && output.numel() == input.numel() * world,
               "all-gather of " << input.numel() << " elements over " << world << " ranks into " << output.numel()
                                << ": the output must hold world x input elements of its dtype on its device");
}

bool Communicator::allAgree(bool ok) {
  for (const std::string& vote : allGather(ok ? "1" : "0")) {
    if (vote != "1") return false;
  }
  return true;
}

namespace {

/// World 1: an average over one rank is the identity; minidp runs without mpirun.
class SingleCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  std::string name() const override { return "single"; }
  std::string describe() const override { return "single: one rank, no communication"; }
  bool supports(Device) const override { return true; }
  std::shared_ptr<Work> allReduceAverage(Tensor buffer, const std::string& tag) override {
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
  }
  /// The average over one rank is the bucket; bf16 on the wire still rounds it, as N ranks would.
  std::shared_ptr<Work> reduceGradients(Tensor buffer, Tensor wire, Reduction reduction, const std::string& tag,
                                        const AfterReduce& after) override {
    checkGradientBucket(buffer, wire, reduction, 1);
    if (wire.defined()) roundTripBf16(buffer, wire);
    if (after) after(buffer.isCuda() ? runtime::computeStream() : nullptr);
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
  }
  std::shared_ptr<Work> allGatherInto(Tensor input, Tensor output, const std::string& tag,
                                      const AfterReduce& after) override {
    checkAllGather(input, output, 1);
    output.copyFrom(input);
    if (after) after(output.isCuda() ? runtime::computeStream() : nullptr);
    return std::make_shared<CompletedWork>(tag, input.nbytes());
  }
  std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) override {
    return std::make_shared<CompletedWork>(tag, buffer.nbytes());
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
      {"mpi", "MPI all-reduce of CPU tensors (under mpirun)",
       [](const CommOptions& opts, MpiEnvironment* env) -> std::shared_ptr<Communicator> {
         MINIDP_CHECK(env, "--comm mpi needs the process to be started by mpirun");
         MINIDP_CHECK(!opts.cuda, "--comm mpi averages CPU tensors; use nccl for --device cuda");
         return std::make_shared<MpiCommunicator>(*env, opts.watchdogSeconds);
       }},
      {"nccl", "NCCL all-reduce of CUDA tensors (under mpirun)",
       [](const CommOptions& opts, MpiEnvironment* env) -> std::shared_ptr<Communicator> {
         MINIDP_CHECK(opts.cuda, "--comm nccl averages CUDA tensors; use mpi for --device cpu");
#if MINIDP_WITH_CUDA
         return std::make_shared<NcclCommunicator>(opts, env);
#else
         (void)env;
         throwError("--comm nccl: minidp was built without CUDA", __FILE__, __LINE__);
#endif
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

std::shared_ptr<Communicator> makeCommunicator(const CommOptions& opts, MpiEnvironment* env) {
  const int world = env ? env->worldSize() : 1;
  std::string backend = opts.backend;
  if (backend == "auto") {
    if (opts.cuda) {
      backend = world > 1 ? "nccl" : "single";
    } else {
      backend = env ? "mpi" : "single";
    }
  }
  for (const CommBackend& b : commBackends()) {
    if (b.name == backend) return b.make(opts, env);
  }
  std::string names;
  for (const std::string& name : commBackendNames()) names += (names.empty() ? "" : ", ") + name;
  throwError("unknown communicator backend '" + opts.backend + "' (" + names + ")", __FILE__, __LINE__);
}

}  // namespace minidp::distributed
