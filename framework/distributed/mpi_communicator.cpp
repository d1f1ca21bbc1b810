#include "framework/distributed/mpi_communicator.h"

#include <climits>
#include <cstdio>
#include <sstream>

#include "framework/distributed/comm_thread.h"
#include "framework/ops/dispatch.h"
#include "kernels/bf16_cast.h"
#include "kernels/elementwise.h"

namespace minidp::distributed {

namespace {

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT;
    case DType::BF16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

void checkCpu(const char* what, const Tensor& t) {
  MINIDP_CHECK(t.defined() && !t.isCuda(), "mpi " << what << " needs a CPU tensor");
  MINIDP_CHECK(t.numel() <= INT_MAX, "mpi " << what << " of " << t.numel() << " elements (at most INT_MAX)");
}

}  // namespace

namespace {

/// The bf16 sum as an MPI reduction (commutative): inout = bf16(in + inout), element by element.
void bf16SumOp(void* in, void* inout, int* length, MPI_Datatype*) {
  kernels::cpu::addBf16(static_cast<const bf16*>(in), static_cast<bf16*>(inout), *length);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MpiEnvironment& env, double watchdogSeconds)
    : env_(env),
      watchdog_(
          watchdogSeconds, env.rank(), [] { MpiEnvironment::abortAll(1); }, {}, {},
          [&env](const std::string& tag) { return env.census(tag); }) {
  env_.execute([this] { MPI_CHECK(MPI_Op_create(&bf16SumOp, 1, &bf16Sum_)); }, "bf16 sum op");
}

MpiCommunicator::~MpiCommunicator() {
  try {
    env_.execute([this] { MPI_CHECK(MPI_Op_free(&bf16Sum_)); }, "bf16 sum op");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minidp: %s\n", e.what());
  }
}

std::string MpiCommunicator::describe() const {
  std::ostringstream os;
  os << "mpi: rank " << rank() << " of " << worldSize() << ", reduce to rank 0 + broadcast on a comm thread";
  return os.str();
}

std::shared_ptr<Work> MpiCommunicator::allReduceAverage(Tensor buffer, const std::string& tag) {
  return reduceGradients(std::move(buffer), Tensor(), Reduction::AllReduce, tag);
}

std::shared_ptr<Work> MpiCommunicator::reduceGradients(Tensor buffer, Tensor wire, Reduction reduction,
                                                       const std::string& tag, const AfterReduce& after) {
  checkCpu("reduceGradients", buffer);
  checkGradientBucket(buffer, wire, reduction, worldSize());
  const size_t bytes = wire.defined() ? wire.nbytes() : buffer.nbytes();
  MPI_Comm comm = env_.comm();
  const int rank = env_.rank(), world = env_.worldSize();
  MPI_Op bf16Sum = bf16Sum_;
  std::shared_ptr<Work> work = env_.post(
      [buffer, wire, reduction, comm, rank, world, bf16Sum, after] {
        const bool compressed = wire.defined();
        void* data = compressed ? wire.raw() : buffer.raw();
        const int count = static_cast<int>(buffer.numel());
        const MPI_Datatype type = compressed ? MPI_UINT16_T : mpiType(buffer.dtype());
        if (compressed) {
          // ncclAvg on bf16: every rank's input is rounded to bf16 and pre-multiplied by bf16(1/N).
          kernels::cpu::castToBf16(buffer.data<float>(), wire.data<bf16>(), count);
          kernels::cpu::scaleBf16(wire.data<bf16>(), bf16ToFloat(floatToBf16(1.0f / static_cast<float>(world))), count);
        }
        const MPI_Op op = compressed ? bf16Sum : MPI_SUM;
        if (rank == 0) {
          MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, data, count, type, op, 0, comm));
          // fp32: the one place the sum becomes an average (bf16 was scaled before the sum).
          if (!compressed) {
            MINIDP_DISPATCH_FLOAT(
                buffer.dtype(), T,
                kernels::cpu::scale<T>(static_cast<T*>(data), T(1) / T(world), static_cast<T*>(data), count));
          }
        } else {
          MPI_CHECK(MPI_Reduce(data, nullptr, count, type, op, 0, comm));
        }
        // Rank 0's bits go to every rank: the whole bucket, or each rank its shard.
        int64_t first = 0, n = count;
        if (reduction == Reduction::AllReduce) {
          MPI_CHECK(MPI_Bcast(data, count, type, 0, comm));
        } else {
          n = count / world;
          first = rank * n;
          const size_t elementBytes = compressed ? sizeof(bf16) : dtypeSize(buffer.dtype());
          void* mine = static_cast<char*>(data) + first * elementBytes;
          MPI_CHECK(MPI_Scatter(data, static_cast<int>(n), type, rank == 0 ? MPI_IN_PLACE : mine, static_cast<int>(n),
                                type, 0, comm));
        }
        if (compressed) kernels::cpu::castFromBf16(wire.data<bf16>() + first, buffer.data<float>() + first, n);
        if (after) after(nullptr);
      },
      tag, bytes);
  watchdog_.watch(work);
  return work;
}

std::shared_ptr<Work> MpiCommunicator::allGatherShards(Tensor buffer, const std::string& tag) {
  checkCpu("allGatherShards", buffer);
  checkGradientBucket(buffer, Tensor(), Reduction::ReduceScatter, worldSize());
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

std::shared_ptr<Work> MpiCommunicator::allGatherInto(Tensor input, Tensor output, const std::string& tag,
                                                     const AfterReduce& after) {
  checkCpu("allGatherInto", output);
  checkAllGather(input, output, worldSize());
  MPI_Comm comm = env_.comm();
  std::shared_ptr<Work> work = env_.post(
      [input, output, comm, after] {
        const MPI_Datatype type = mpiType(input.dtype());
        const int n = static_cast<int>(input.numel());
        MPI_CHECK(MPI_Allgather(input.raw(), n, type, output.raw(), n, type, comm));
        if (after) after(nullptr);
      },
      tag, output.nbytes());
  watchdog_.watch(work);
  return work;
}

void MpiCommunicator::broadcast(Tensor& tensor, int root) {
  checkCpu("broadcast", tensor);
  env_.broadcastBytes(tensor.raw(), tensor.nbytes(), root);
}

std::vector<std::string> MpiCommunicator::allGather(const std::string& bytes) { return env_.allGather(bytes); }

void MpiCommunicator::abort() noexcept { MpiEnvironment::abortAll(1); }

}  // namespace minidp::distributed
