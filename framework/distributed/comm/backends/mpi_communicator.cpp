#include "framework/distributed/comm/backends/mpi_communicator.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <type_traits>

#include "framework/distributed/comm/comm_thread.h"
#include "framework/tensor/dispatch.h"
#include "kernels/elementwise_kernels.h"

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

void checkCpu(const char* what, const Tensor& t) {
  MINIDP_CHECK(t.defined() && !t.isCuda(), "mpi " << what << " needs a CPU tensor");
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

}  // namespace

MpiCommunicator::MpiCommunicator(MpiEnvironment& env, double watchdogSeconds)
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
}

MpiCommunicator::~MpiCommunicator() {
  try {
    env_.execute(
        [this] {
          for (MPI_Op& op : halfOps_) MPI_CHECK(MPI_Op_free(&op));
        },
        "bf16 and fp16 ops");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidp: %s\n", e.what());
  }
}

std::string MpiCommunicator::describe() const {
  std::ostringstream os;
  os << "mpi: rank " << rank() << " of " << worldSize() << ", reduce to rank 0 + broadcast on a comm thread";
  return os.str();
}

std::shared_ptr<Work> MpiCommunicator::allReduce(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, false, tag);
}

std::shared_ptr<Work> MpiCommunicator::reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, true, tag);
}

std::shared_ptr<Work> MpiCommunicator::reduce(Tensor buffer, ReduceOp op, bool scatter, const std::string& tag) {
  checkCpu("reduction", buffer);
  checkReduction(buffer, op, scatter, worldSize());
  MPI_Comm comm = env_.comm();
  const int rank = env_.rank(), world = env_.worldSize();
  const MPI_Op reduceOp = mpiOp(buffer.dtype(), op, halfOps_);
  std::shared_ptr<Work> work = env_.post(
      [buffer, op, scatter, comm, rank, world, reduceOp] {
        const bool half = buffer.dtype() == DType::BF16 || buffer.dtype() == DType::F16;
        void* data = buffer.raw();
        const int count = static_cast<int>(buffer.numel());
        const MPI_Datatype type = mpiType(buffer.dtype());
        // ncclAvg on bf16 and fp16: every rank's input is pre-multiplied by 1/N in the type, then summed.
        if (half && op == ReduceOp::Avg) {
          const float inverse = 1.0f / static_cast<float>(world);
          if (buffer.dtype() == DType::BF16) {
            scaleHalf(buffer.data<minidp::bf16>(), inverse, count);
          } else {
            scaleHalf(buffer.data<fp16>(), inverse, count);
          }
        }
        if (rank == 0) {
          MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, data, count, type, reduceOp, 0, comm));
          // fp32 / fp64: the one place a sum becomes an average (bf16 and fp16 were scaled before the sum).
          if (!half && op == ReduceOp::Avg) {
            MINIDP_DISPATCH_FLOAT(
                buffer.dtype(), T,
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
        void* mine = static_cast<char*>(data) + static_cast<size_t>(rank) * n * dtypeSize(buffer.dtype());
        MPI_CHECK(MPI_Scatter(data, n, type, rank == 0 ? MPI_IN_PLACE : mine, n, type, 0, comm));
      },
      tag, buffer.nbytes());
  watchdog_.watch(work);
  return work;
}

std::shared_ptr<Work> MpiCommunicator::allGatherShards(Tensor buffer, const std::string& tag) {
  checkCpu("allGatherShards", buffer);
  MINIDP_CHECK(buffer.numel() % worldSize() == 0,
               "all-gather of shards of " << buffer.numel() << " elements over " << worldSize() << " ranks");
  MPI_Comm comm = env_.comm();
  const int world = env_.worldSize();
  std::shared_ptr<Work> work = env_.post(
      [buffer, comm, world] {
        const int shard = static_cast<int>(buffer.numel() / world);
        MPI_CHECK(
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.raw(), shard, mpiType(buffer.dtype()), comm));
      },
      tag, buffer.nbytes());
  watchdog_.watch(work);
  return work;
}

std::shared_ptr<Work> MpiCommunicator::allGather(Tensor input, Tensor output, const std::string& tag) {
  checkCpu("allGather", output);
  checkAllGather(input, output, worldSize());
  MPI_Comm comm = env_.comm();
  std::shared_ptr<Work> work = env_.post(
      [input, output, comm] {
        const MPI_Datatype type = mpiType(input.dtype());
        const int n = static_cast<int>(input.numel());
        MPI_CHECK(MPI_Allgather(input.raw(), n, type, output.raw(), n, type, comm));
      },
      tag, output.nbytes());
  watchdog_.watch(work);
  return work;
}

std::shared_ptr<Work> MpiCommunicator::enqueue(const std::string& tag, Tensor keep,
                                               const std::function<void(cudaStream_t)>& task) {
  return env_.post([keep, task] { task(nullptr); }, tag, 0);
}

void MpiCommunicator::broadcast(Tensor& tensor, int root) {
  checkCpu("broadcast", tensor);
  env_.broadcastBytes(tensor.raw(), tensor.nbytes(), root);
}

std::vector<std::string> MpiCommunicator::allGather(const std::string& bytes) { return env_.allGather(bytes); }

void MpiCommunicator::abort() noexcept { MpiEnvironment::abortAll(1); }

}  // namespace minidp::distributed
