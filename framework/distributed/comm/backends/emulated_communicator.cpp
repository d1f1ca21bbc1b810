#include "framework/distributed/comm/backends/emulated_communicator.h"

#include <sstream>

#include "framework/distributed/job/comm_thread.h"
#include "framework/tensor/dispatch.h"
#include "kernels/emulated_link.h"

#if MINIDP_WITH_CUDA
#include "framework/distributed/comm/cuda_work.h"
#endif

namespace minidp::distributed {

EmulatedCommunicator::EmulatedCommunicator(int world, double gbps, double latencyUs, bool cuda, int ctas,
                                           bool commHighPriority)
    : world_(world), gbps_(gbps), latencyUs_(latencyUs), cuda_(cuda), ctas_(ctas > 0 ? ctas : 16) {
  MINIDP_CHECK(world >= 1, "emulated world of " << world << " ranks");
  MINIDP_CHECK(gbps > 0 && latencyUs >= 0, "emulated link of " << gbps << " GB/s, " << latencyUs << " us");
  if (cuda_) {
#if MINIDP_WITH_CUDA
    warnIfSerialisedStreams(0);
    stream_ = std::make_unique<CommStream>(commHighPriority);
#else
    (void)commHighPriority;
    throwError("emulated link on cuda: minidp was built without CUDA", __FILE__, __LINE__);
#endif
  } else {
    thread_ = std::make_unique<CommThread>();
  }
}

EmulatedCommunicator::~EmulatedCommunicator() = default;

std::string EmulatedCommunicator::describe() const {
  std::ostringstream os;
  os << "emulated (NOT a multi-rank run: one process modelling " << world_ << " identical ranks over a " << gbps_
     << " GB/s, " << latencyUs_ << " us link; all-reduce = latency + 2(N-1)/N * bytes / bandwidth";
  if (cuda_) os << ", " << ctas_ << " CTAs on the comm stream";
  os << ")";
  return os.str();
}

double EmulatedCommunicator::modelledSeconds(size_t bytes) const {
  return latencyUs_ * 1e-6 + 2.0 * (world_ - 1) / world_ * static_cast<double>(bytes) / (gbps_ * 1e9);
}

std::shared_ptr<Work> EmulatedCommunicator::transfer(const std::string& tag, Tensor touched, double seconds,
                                                     const std::function<void(cudaStream_t)>& local) {
  MINIDP_CHECK(touched.defined() && supports(touched.device()), "emulated " << (cuda_ ? "cuda" : "cpu")
                                                                            << " link cannot carry a "
                                                                            << deviceName(touched.device())
                                                                            << " tensor");
  const int64_t bytes = static_cast<int64_t>(touched.nbytes()) / 4 * 4;  // the link touches whole words
  const int ctas = ctas_;
  if (cuda_) {
#if MINIDP_WITH_CUDA
    return stream_->launch(tag, touched, [&](cudaStream_t s) {
      local(s);
      kernels::cuda::emulatedLink(touched.raw(), bytes, seconds, ctas, s);
    });
#endif
  }
  return thread_->post(
      [touched, local, bytes, seconds, ctas] {
        local(nullptr);
        kernels::cpu::emulatedLink(touched.raw(), bytes, seconds, ctas);
      },
      tag, touched.nbytes());
}

double EmulatedCommunicator::modelledHalfRingSeconds(size_t bytes) const {
  return latencyUs_ * 1e-6 + static_cast<double>(world_ - 1) / world_ * static_cast<double>(bytes) / (gbps_ * 1e9);
}

namespace {

/// Identical ranks' reduction of `buffer`'s first `n` elements in place: their average, maximum and minimum are
/// the copy; their sum is `world` times it.
void reduceIdentical(Tensor buffer, int64_t n, ReduceOp op, int world, cudaStream_t s) {
  if (op != ReduceOp::Sum || world == 1) return;
  switch (buffer.dtype()) {
    case DType::F32: MINIDP_LAUNCH_ON(s, buffer, sumOfCopies, buffer.data<float>(), world, n); break;
    case DType::F64: MINIDP_LAUNCH_ON(s, buffer, sumOfCopies, buffer.data<double>(), world, n); break;
    case DType::I32: MINIDP_LAUNCH_ON(s, buffer, sumOfCopies, buffer.data<int32_t>(), world, n); break;
    case DType::BF16: MINIDP_LAUNCH_ON(s, buffer, sumOfCopies, buffer.data<minidp::bf16>(), world, n); break;
    case DType::I8: MINIDP_LAUNCH_ON(s, buffer, sumOfCopies, buffer.data<int8_t>(), world, n); break;
    case DType::U8: MINIDP_LAUNCH_ON(s, buffer, sumOfCopies, buffer.data<uint8_t>(), world, n); break;
    case DType::F16: MINIDP_LAUNCH_ON(s, buffer, sumOfCopies, buffer.data<fp16>(), world, n); break;
  }
}

/// `src` copied into slots first..world - 1 of `output` (n elements each), on the comm stream `s` (null: here).
void repeatInto(const Tensor& output, const Tensor& src, int64_t n, int first, int world, cudaStream_t s) {
  for (int r = first; r < world; ++r) {
    Tensor slot = Tensor::alias(output, r * n, {n});
    if (s) {
      slot.copyFrom(src, s);
    } else {
      slot.copyFrom(src);
    }
  }
}

}  // namespace

std::shared_ptr<Work> EmulatedCommunicator::allReduce(Tensor buffer, ReduceOp op, const std::string& tag) {
  checkReduction(buffer, op, false, world_);
  const int world = world_;
  return transfer(tag, buffer, modelledSeconds(buffer.nbytes()),
                  [buffer, op, world](cudaStream_t s) { reduceIdentical(buffer, buffer.numel(), op, world, s); });
}

std::shared_ptr<Work> EmulatedCommunicator::reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) {
  checkReduction(buffer, op, true, world_);
  const int world = world_;
  // This process is rank 0: its shard, the first n / N elements, ends with the identical ranks' reduction.
  return transfer(tag, buffer, modelledHalfRingSeconds(buffer.nbytes()), [buffer, op, world](cudaStream_t s) {
    reduceIdentical(buffer, buffer.numel() / world, op, world, s);
  });
}

std::shared_ptr<Work> EmulatedCommunicator::allGatherShards(Tensor buffer, const std::string& tag) {
  MINIDP_CHECK(buffer.defined() && buffer.numel() % world_ == 0,
               "all-gather of shards of " << buffer.numel() << " elements over " << world_ << " ranks");
  const int world = world_;
  // Rank 0's shard repeated into every other slot: the other ranks' updates are never computed here, so the
  // gathered values are not a real run's (the time and the memory are).
  return transfer(tag, buffer, modelledHalfRingSeconds(buffer.nbytes()), [buffer, world](cudaStream_t s) {
    const int64_t n = buffer.numel() / world;
    repeatInto(buffer, Tensor::alias(buffer, 0, {n}), n, 1, world, s);
  });
}

std::shared_ptr<Work> EmulatedCommunicator::allGather(Tensor input, Tensor output, const std::string& tag) {
  checkAllGather(input, output, world_);
  const double seconds = modelledHalfRingSeconds(output.nbytes());
  const int world = world_;
  const int64_t n = input.numel();
  return transfer(tag, output, seconds,
                  [input, output, world, n](cudaStream_t s) { repeatInto(output, input, n, 0, world, s); });
}

std::shared_ptr<Work> EmulatedCommunicator::enqueue(const std::string& tag, Tensor keep,
                                                    const std::function<void(cudaStream_t)>& task) {
  if (cuda_) {
#if MINIDP_WITH_CUDA
    return stream_->launch(tag, std::move(keep), task);
#endif
  }
  return thread_->post([keep, task] { task(nullptr); }, tag, 0);
}

void EmulatedCommunicator::broadcast(Tensor& tensor, int root) {
  MINIDP_CHECK(tensor.defined() && supports(tensor.device()), "emulated broadcast of a tensor on the wrong device");
  MINIDP_CHECK(root >= 0 && root < world_, "broadcast from rank " << root << " of " << world_);
}

std::vector<std::string> EmulatedCommunicator::allGather(const std::string& bytes) {
  return std::vector<std::string>(world_, bytes);
}

}  // namespace minidp::distributed
