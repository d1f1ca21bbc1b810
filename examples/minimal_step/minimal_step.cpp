// minimal-step: whole data-parallel training steps without the Trainer or the CLI, as llm.c's train loop
// writes them: a model, DDP and its gradient buckets, a comm hook that sends fp16, the optimizer. Under
// mpirun -np N every rank draws the same global batch and trains on its own rows; at the end the loss must
// have fallen and every rank must hold the same parameter bits.    mpirun -np 2 minimal-step
#include <cstdio>
#include <random>

#include "framework/distributed/gradient/ddp.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/ops/ops.h"
#include "framework/optim/optimizer.h"
#include "models/mlp.h"

using namespace minidp;
namespace dist = minidp::distributed;

// A comm hook (PyTorch's fp16_compress_hook): the fp32 bucket goes on the wire as fp16, is averaged there
// and widened back. The casts run on the comm thread in order with the collective, beside backward.
class Fp16Hook : public dist::CommHook {
 public:
  std::string name() const override { return "fp16"; }
  void setup(const std::vector<dist::GradBucket>& buckets, dist::Communicator&) override {
    for (const dist::GradBucket& b : buckets) {
      MINIDP_CHECK(b.reduction == dist::Reduction::AllReduce && !b.buffer.isCuda(), "fp16 hook: CPU all-reduce only");
      wires_.push_back(Tensor::empty({b.buffer.numel()}, DType::F16, Device::CPU));  // (n) per bucket
    }
  }
  std::shared_ptr<dist::Work> reduce(const dist::GradBucket& bucket, dist::Communicator& comm) override {
    const Tensor grad = bucket.buffer, wire = wires_.at(bucket.index);
    const std::string tag = "bucket " + std::to_string(bucket.index);
    auto narrow = comm.enqueue(tag + " to fp16", grad, [grad, wire](cudaStream_t) {
      for (int64_t i = 0; i < grad.numel(); ++i) wire.data<fp16>()[i] = floatToFp16(grad.data<float>()[i]);
    });
    auto average = comm.allReduce(wire, dist::ReduceOp::Avg, tag);
    auto widen = comm.enqueue(tag + " from fp16", grad, [grad, wire](cudaStream_t) {
      for (int64_t i = 0; i < grad.numel(); ++i) grad.data<float>()[i] = fp16ToFloat(wire.data<fp16>()[i]);
    });
    return std::make_shared<dist::WorkChain>(tag, grad.nbytes(),
                                             std::vector<std::shared_ptr<dist::Work>>{narrow, average, widen});
  }

 private:
  std::vector<Tensor> wires_;
};

int run(dist::MpiEnvironment* env) {
  std::shared_ptr<dist::Communicator> comm = dist::makeCommunicator({}, env);
  const int rank = comm->rank(), world = comm->worldSize();

  // DDP checks that the ranks agree, copies rank 0's parameters to all and buckets the gradients (caps in
  // bytes, small enough for several buckets here); each bucket is reduced by the hook as soon as it fills.
  const int64_t B = 32, in = 16, classes = 4;  // rows per rank, features, classes
  models::MLP model({in, 64, classes}, /*seed=*/1);
  const auto makeHook = [](const dist::CommHookOptions&) { return std::make_unique<Fp16Hook>(); };
  dist::registerCommHook({"fp16", "fp32 buckets sent as fp16", makeHook, {}, {}});  // name, help, factory, refusals, flags
  dist::DdpOptions options;
  options.bucketCapBytes = 4096;
  options.firstBucketCapBytes = 1024;
  options.commHook.name = "fp16";
  dist::DistributedDataParallel ddp(model.namedParameters(), comm, options);
  optim::Sgd optimizer(model.namedParameters(), /*lr=*/0.05, /*momentum=*/0.9);

  // The task: the class a fixed random linear teacher scores highest. Every rank draws the step's global batch
  // of world x B rows (the same on every rank) and takes its own rows [r B, (r + 1) B).
  const auto normal = [](unsigned seed, int64_t rows, int64_t cols) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> draw;
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& e : v) e = draw(gen);
    return Tensor::fromVector(v, {rows, cols});
  };
  const Variable teacher(normal(12345, in, classes));
  double first = 0, last = 0;  // mean loss of the first and the last 10 steps on this rank
  const int steps = 150;
  for (int step = 0; step < steps; ++step) {
    const Tensor x = ops::narrow(Variable(normal(step, world * B, in)), 0, rank * B, B).data();  // (B, in)
    const Tensor y = ops::argmax(ops::matmul(Variable(x), teacher).data(), 1);                   // int32 (B)
    ddp.prepareStep();  // zero the gradient buckets
    Variable loss = model.loss(x, y);
    loss.backward();  // buckets launch as their gradients become ready
    ddp.finalize();   // wait for the last: every rank holds the averaged gradients
    optimizer.step();
    const double value = loss.data().toVector<float>()[0];
    if (step < 10) first += value / 10;
    if (step >= steps - 10) last += value / 10;
  }
  bool same = true;  // every rank's parameter bytes equal rank 0's
  for (const auto& [name, p] : model.namedParameters()) {
    const std::vector<std::string> all =
        comm->allGather(std::string(static_cast<const char*>(p.data().raw()), p.data().nbytes()));
    for (const std::string& bytes : all) same = same && bytes == all[0];
  }
  std::printf("rank %d of %d: loss %.4f -> %.4f, parameters %s\n", rank, world, first, last,
              same ? "identical" : "DIFFER");
  const bool ok = comm->allAgree(same && last < 0.5 * first);
  if (rank == 0) std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

int main() {
  std::unique_ptr<dist::MpiEnvironment> env;  // the job: MPI under mpirun, else one rank alone
  if (dist::MpiEnvironment::launchedByMpirun()) env = std::make_unique<dist::MpiEnvironment>();
  try {
    return run(env.get());
  } catch (const std::exception& e) {  // one line, then end every rank: none waits on a collective forever
    std::fprintf(stderr, "minimal-step: %s\n", e.what());
    if (env) dist::MpiEnvironment::abortAll(1);
    return 1;
  }
}
