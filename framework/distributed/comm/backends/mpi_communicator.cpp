#include "framework/distributed/comm/backends/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <type_traits>

#include "framework/distributed/job/comm_thread.h"
#include "framework/runtime/device.h"
#include "framework/tensor/dispatch.h"
#include "kernels/elementwise_kernels.h"

#if MINIDP_WITH_CUDA
#include "base/cuda_check.h"
#include "framework/distributed/comm/cuda_work.h"
#endif

namespace minidp::distributed {

namespace {

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT;
    case DType::BF16: return MPI_UINT16_T;
    case DType::I8: return MPI_INT8_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::F16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

void checkTensor(const char* what, const Tensor& t, bool cudaAllowed) {
  MINIDP_CHECK(t.defined() && (cudaAllowed || !t.isCuda()),
               "mpi " << what << " needs a CPU tensor (this communicator was built without CUDA staging)");
  MINIDP_CHECK(t.numel() <= INT_MAX, "mpi " << what << " of " << t.numel() << " elements (at most INT_MAX)");
}

}  // namespace

namespace {

float toFloat(bf16 x) { return bf16ToFloat(x); }
float toFloat(fp16 x) { return fp16ToFloat(x); }
template <typename H>
H fromFloat(float x) {
  if constexpr (std::is_same_v<H, bf16>) {
    return floatToBf16(x);
  } else {
    return floatToFp16(x);
  }
}

/// A 16-bit float reduction as an MPI op (commutative): inout = H(combine(in, inout)), element by element,
/// computed in float and rounded once. Max and min keep a NaN of either side.
template <typename H, ReduceOp kOp>
void halfOpFunction(void* in, void* inout, int* length, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = toFloat(a[i]), y = toFloat(b[i]);
    if constexpr (kOp == ReduceOp::Sum) {
      b[i] = fromFloat<H>(x + y);
    } else if (std::isnan(x) || (kOp == ReduceOp::Max ? x > y : x < y)) {
      b[i] = a[i];
    }
  }
}

using MpiUserFunction = void (*)(void*, void*, int*, MPI_Datatype*);
/// The functions of MpiCommunicator::halfOps_, in its order.
constexpr std::array<MpiUserFunction, 6> kHalfOpFunctions = {
    &halfOpFunction<bf16, ReduceOp::Sum>, &halfOpFunction<bf16, ReduceOp::Max>, &halfOpFunction<bf16, ReduceOp::Min>,
    &halfOpFunction<fp16, ReduceOp::Sum>, &halfOpFunction<fp16, ReduceOp::Max>, &halfOpFunction<fp16, ReduceOp::Min>};

/// The MPI op that reduces `dtype` by `op` (Avg: the sum; the caller scales). `halfOps`: MpiCommunicator's.
MPI_Op mpiOp(DType dtype, ReduceOp op, const std::array<MPI_Op, 6>& halfOps) {
  int kind = 0;  // sum, max, min
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: kind = 0; break;
    case ReduceOp::Max: kind = 1; break;
    case ReduceOp::Min: kind = 2; break;
  }
  switch (dtype) {
    case DType::BF16: return halfOps[kind];
    case DType::F16: return halfOps[3 + kind];
    case DType::F32:
    case DType::F64:
    case DType::I32:
    case DType::I8:
    case DType::U8: break;
  }
  return kind == 0 ? MPI_SUM : kind == 1 ? MPI_MAX : MPI_MIN;
}

/// x *= H(s) element by element, rounded to H: ncclAvg's pre-multiplication of a 16-bit float.
template <typename H>
void scaleHalf(H* x, float s, int64_t n) {
  const float scale = toFloat(fromFloat<H>(s));
  for (int64_t i = 0; i < n; ++i) x[i] = fromFloat<H>(toFloat(x[i]) * scale);
}

#if MINIDP_WITH_CUDA
/// One staged collective's events (ready on the compute stream; start and done on the comm stream), back to
/// the pool when both the work and the MPI thread's task have let them go.
struct StagedEvents {
  explicit StagedEvents(std::shared_ptr<EventPool> p) : pool(std::move(p)), events(pool->acquire()) {}
  ~StagedEvents() { pool->release(events); }
  std::shared_ptr<EventPool> pool;
  EventPool::Events events;
  cudaEvent_t ready() const { return events[0]; }
  cudaEvent_t start() const { return events[1]; }
  cudaEvent_t done() const { return events[2]; }
};

/// A collective of CUDA tensors run on the MPI thread: completion is the host task's; wait() blocks until
/// the task is done (its "done" event recorded), then orders the compute stream after it.
class StagedWork : public Work {
 public:
  StagedWork(std::string tag, size_t bytes, std::shared_ptr<CpuWork> task, std::shared_ptr<StagedEvents> events)
      : Work(std::move(tag), bytes), task_(std::move(task)), events_(std::move(events)) {}
  void wait() override {
    task_->wait();  // rethrows the MPI thread's error; afterwards "done" is recorded
    CUDA_CHECK(cudaStreamWaitEvent(runtime::computeStream(), events_->done(), 0));
  }
  bool completed() const override { return task_->completed(); }
  double runningSinceMs() const override { return task_->runningSinceMs(); }
  WorkTiming timing(cudaEvent_t reference) const override {
    MINIDP_CHECK(completed(), "timing of '" << tag() << "' before it completed");
    WorkTiming t;
    t.launchedMs = task_->timing().launchedMs;
    float ms = 0;
    if (reference) {
      CUDA_CHECK(cudaEventElapsedTime(&ms, reference, events_->start()));
      t.startedMs = ms;
    }
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_->start(), events_->done()));
    t.finishedMs = t.startedMs + ms;
    return t;
  }

 private:
  std::shared_ptr<CpuWork> task_;
  std::shared_ptr<StagedEvents> events_;
};

std::shared_ptr<EventPool>& eventPool() {
  static auto pool = std::make_shared<EventPool>();
  return pool;
}
#endif

/// The reduction of `count` elements at `data` (host memory) over `comm` by `reduceOp` (mpiOp's): MPI_Reduce to
/// rank 0 (an fp32/fp64 average scaled there; bf16 and fp16 pre-scaled on every rank, as ncclAvg does), then
/// MPI_Bcast, or each rank its shard by MPI_Scatter.
void reduceOnHost(void* data, int count, DType dtype, ReduceOp op, bool scatter, MPI_Comm comm, int rank, int world,
                  MPI_Op reduceOp) {
  const bool half = dtype == DType::BF16 || dtype == DType::F16;
  const MPI_Datatype type = mpiType(dtype);
  if (half && op == ReduceOp::Avg) {
    const float inverse = 1.0f / static_cast<float>(world);
    if (dtype == DType::BF16) {
      scaleHalf(static_cast<minidp::bf16*>(data), inverse, count);
    } else {
      scaleHalf(static_cast<fp16*>(data), inverse, count);
    }
  }
  if (rank == 0) {
    MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, data, count, type, reduceOp, 0, comm));
    // fp32 / fp64: the one place a sum becomes an average (bf16 and fp16 were scaled before the sum).
    if (!half && op == ReduceOp::Avg) {
      MINIDP_DISPATCH_FLOAT(dtype, T,
                            kernels::cpu::scale<T>(static_cast<T*>(data), T(1) / T(world), static_cast<T*>(data), count));
    }
  } else {
    MPI_CHECK(MPI_Reduce(data, nullptr, count, type, reduceOp, 0, comm));
  }
  // Rank 0's bits go to every rank: the whole buffer, or each rank its shard.
  if (!scatter) {
    MPI_CHECK(MPI_Bcast(data, count, type, 0, comm));
    return;
  }
  const int n = count / world;
  void* mine = static_cast<char*>(data) + static_cast<size_t>(rank) * n * dtypeSize(dtype);
  MPI_CHECK(MPI_Scatter(data, n, type, rank == 0 ? MPI_IN_PLACE : mine, n, type, 0, comm));
}

}  // namespace

MpiCommunicator::MpiCommunicator(MpiEnvironment& env, double watchdogSeconds, bool cuda, bool highPriority)
    : env_(env),
      watchdog_(
          watchdogSeconds, env.rank(),
          [&env](const std::string& line) { env.endJob(1, line, [line](bool) { return line; }); }, {}, {},
          [&env](const std::string& tag) { return env.census(tag); }) {
  env_.execute(
      [this] {
        for (size_t i = 0; i < halfOps_.size(); ++i) MPI_CHECK(MPI_Op_create(kHalfOpFunctions[i], 1, &halfOps_[i]));
      },
      "bf16 and fp16 ops");
  if (!cuda) return;
#if MINIDP_WITH_CUDA
  runtime::computeStream();  // the device's context first
  device_ = runtime::currentDevice();
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, highPriority ? greatest : least));
  warnIfSerialisedStreams(env.rank());
#else
  (void)highPriority;
  throwError("--comm mpi with --device cuda: minidp was built without CUDA", __FILE__, __LINE__);
#endif
}

MpiCommunicator::~MpiCommunicator() {
  try {
    env_.execute(
        [this] {
          for (auto& slot : staging_) {
            for (auto& [size, ptr] : slot) runtime::pinnedRelease(ptr);
            slot.clear();
          }
          for (MPI_Op& op : halfOps_) MPI_CHECK(MPI_Op_free(&op));
        },
        "mpi communicator release");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidp: %s\n", e.what());
  }
#if MINIDP_WITH_CUDA
  if (stream_) {
    cudaError_t status = cudaStreamSynchronize(stream_);
    if (status == cudaSuccess) status = cudaStreamDestroy(stream_);
    if (status != cudaSuccess) std::fprintf(stderr, "minidp: destroying the mpi comm stream failed: %s\n", cudaGetErrorString(status));
  }
#endif
}

bool MpiCommunicator::supports(Device device) const { return device == Device::CPU || stream_ != nullptr; }

std::string MpiCommunicator::describe() const {
  std::ostringstream os;
  os << "mpi: rank " << rank() << " of " << worldSize() << ", reduce to rank 0 + broadcast on a comm thread";
  if (stream_) os << ", CUDA tensors staged through pinned host buffers (cuda:" << device_ << ")";
  return os.str();
}

void* MpiCommunicator::staging(size_t bytes, int slot) {
  size_t size = 4096;
  while (size < bytes) size *= 2;
  void*& ptr = staging_[slot][size];
  if (!ptr) ptr = runtime::pinnedAllocate(size);
  return ptr;
}

std::shared_ptr<Work> MpiCommunicator::postCuda(const std::string& tag, size_t bytes,
                                                std::function<void(cudaStream_t)> body) {
#if MINIDP_WITH_CUDA
  auto events = std::make_shared<StagedEvents>(eventPool());
  CUDA_CHECK(cudaEventRecord(events->ready(), runtime::computeStream()));
  const int device = device_;
  cudaStream_t stream = stream_;
  std::shared_ptr<CpuWork> task = env_.post(
      [device, stream, events, body = std::move(body)] {
        CUDA_CHECK(cudaSetDevice(device));
        CUDA_CHECK(cudaStreamWaitEvent(stream, events->ready(), 0));
        CUDA_CHECK(cudaEventRecord(events->start(), stream));
        body(stream);
        CUDA_CHECK(cudaEventRecord(events->done(), stream));
        // The tensors the task holds go when it returns: nothing of it may still run on the comm stream.
        CUDA_CHECK(cudaStreamSynchronize(stream));
      },
      tag, bytes);
  watchdog_.watch(task);
  return std::make_shared<StagedWork>(tag, bytes, std::move(task), std::move(events));
#else
  (void)tag;
  (void)bytes;
  (void)body;
  throwError("mpi: CUDA tensors in a build without CUDA", __FILE__, __LINE__);
#endif
}

std::shared_ptr<Work> MpiCommunicator::post(const std::string& tag, bool cuda, Tensor in, Tensor out,
                                            std::function<void(void* in, void* out)> run) {
  const size_t bytes = std::max(in.nbytes(), out.defined() ? out.nbytes() : size_t(0));
  if (!cuda) {
    std::shared_ptr<Work> work = env_.post(
        [in, out, run = std::move(run)] { run(in.raw(), out.defined() ? out.raw() : nullptr); }, tag, bytes);
    watchdog_.watch(work);
    return work;
  }
#if MINIDP_WITH_CUDA
  return postCuda(tag, bytes, [this, in, out, run = std::move(run)](cudaStream_t s) {
    void* hostIn = staging(in.nbytes(), 0);
    void* hostOut = out.defined() ? staging(out.nbytes(), 1) : nullptr;
    CUDA_CHECK(cudaMemcpyAsync(hostIn, in.raw(), in.nbytes(), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    run(hostIn, hostOut);
    const Tensor& result = out.defined() ? out : in;
    CUDA_CHECK(cudaMemcpyAsync(result.raw(), out.defined() ? hostOut : hostIn, result.nbytes(), cudaMemcpyHostToDevice, s));
  });
#else
  throwError("mpi: CUDA tensors in a build without CUDA", __FILE__, __LINE__);
#endif
}

std::shared_ptr<Work> MpiCommunicator::allReduce(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, false, tag);
}

std::shared_ptr<Work> MpiCommunicator::reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, true, tag);
}

std::shared_ptr<Work> MpiCommunicator::reduce(Tensor buffer, ReduceOp op, bool scatter, const std::string& tag) {
  checkTensor("reduction", buffer, supports(Device::CUDA));
  checkReduction(buffer, op, scatter, worldSize());
  MPI_Comm comm = env_.comm();
  const int rank = env_.rank(), world = env_.worldSize();
  const DType dtype = buffer.dtype();
  const MPI_Op reduceOp = mpiOp(dtype, op, halfOps_);
  const int count = static_cast<int>(buffer.numel());
  const bool cuda = buffer.isCuda();
  return post(tag, cuda, std::move(buffer), Tensor(), [=](void* data, void*) {
    reduceOnHost(data, count, dtype, op, scatter, comm, rank, world, reduceOp);
  });
}

std::shared_ptr<Work> MpiCommunicator::allGatherShards(Tensor buffer, const std::string& tag) {
  checkTensor("allGatherShards", buffer, supports(Device::CUDA));
  MINIDP_CHECK(buffer.numel() % worldSize() == 0,
               "all-gather of shards of " << buffer.numel() << " elements over " << worldSize() << " ranks");
  MPI_Comm comm = env_.comm();
  const int shard = static_cast<int>(buffer.numel() / worldSize());
  const MPI_Datatype type = mpiType(buffer.dtype());
  const bool cuda = buffer.isCuda();
  return post(tag, cuda, std::move(buffer), Tensor(), [=](void* data, void*) {
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, shard, type, comm));
  });
}

std::shared_ptr<Work> MpiCommunicator::allGather(Tensor input, Tensor output, const std::string& tag) {
  checkTensor("allGather", output, supports(Device::CUDA));
  checkAllGather(input, output, worldSize());
  MPI_Comm comm = env_.comm();
  const MPI_Datatype type = mpiType(input.dtype());
  const int n = static_cast<int>(input.numel());
  const bool cuda = output.isCuda();
  return post(tag, cuda, std::move(input), std::move(output), [=](void* in, void* out) {
    MPI_CHECK(MPI_Allgather(in, n, type, out, n, type, comm));
  });
}

std::shared_ptr<Work> MpiCommunicator::enqueue(const std::string& tag, Tensor keep,
                                               const std::function<void(cudaStream_t)>& task) {
  if (keep.defined() && keep.isCuda()) return postCuda(tag, 0, [keep, task](cudaStream_t s) { task(s); });
  return env_.post([keep, task] { task(nullptr); }, tag, 0);
}

void MpiCommunicator::broadcast(Tensor& tensor, int root) {
  checkTensor("broadcast", tensor, supports(Device::CUDA));
  if (!tensor.isCuda()) {
    env_.broadcastBytes(tensor.raw(), tensor.nbytes(), root);
    return;
  }
  Tensor host = tensor.to(Device::CPU);  // setup only: synchronous
  env_.broadcastBytes(host.raw(), host.nbytes(), root);
  tensor.copyFrom(host);
}

std::vector<std::string> MpiCommunicator::allGather(const std::string& bytes) { return env_.allGather(bytes); }

void MpiCommunicator::abort() noexcept { MpiEnvironment::abortAll(1); }

}  // namespace minidp::distributed
