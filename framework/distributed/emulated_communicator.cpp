#include "framework/distributed/emulated_communicator.h"

#include <sstream>

#include "framework/distributed/comm_thread.h"
#include "kernels/bf16_cast.h"
#include "kernels/emulated_link.h"

#if MINIDP_WITH_CUDA
#include "framework/distributed/cuda_work.h"
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

std::shared_ptr<Work> EmulatedCommunicator::allReduceAverage(Tensor buffer, const std::string& tag) {
  return reduceGradients(std::move(buffer), Tensor(), Reduction::AllReduce, tag);
}

std::shared_ptr<Work> EmulatedCommunicator::reduceGradients(Tensor buffer, Tensor wire, Reduction reduction,
                                                            const std::string& tag, const AfterReduce& after) {
  MINIDP_CHECK(buffer.defined() && supports(buffer.device()), "emulated " << (cuda_ ? "cuda" : "cpu")
                                                                          << " link cannot reduce a "
                                                                          << deviceName(buffer.device()) << " tensor");
  MINIDP_CHECK(reduction == Reduction::AllReduce, "the emulated link models all-reduce only (no ZeRO-1)");
  MINIDP_CHECK(!after, "the emulated link runs nothing after a reduction (no --sparse-embedding-grad)");
  checkGradientBucket(buffer, wire, reduction, world_);
  // bf16 on the wire: the link carries the bf16 copy; identical ranks average to it, cast back.
  const bool bf16 = wire.defined();
  Tensor onWire = bf16 ? wire : buffer;
  const size_t bytes = onWire.nbytes();
  const double seconds = modelledSeconds(bytes);
  const int ctas = ctas_;
  const int64_t n = buffer.numel();
  if (cuda_) {
#if MINIDP_WITH_CUDA
    return stream_->launch(tag, buffer, [&](cudaStream_t s) {
      if (bf16) kernels::cuda::castToBf16(buffer.data<float>(), wire.data<minidp::bf16>(), n, s);
      kernels::cuda::emulatedLink(onWire.raw(), static_cast<int64_t>(bytes), seconds, ctas, s);
      if (bf16) kernels::cuda::castFromBf16(wire.data<minidp::bf16>(), buffer.data<float>(), n, s);
    });
#endif
  }
  return thread_->post(
      [buffer, wire, onWire, bf16, n, bytes, seconds, ctas] {
        if (bf16) kernels::cpu::castToBf16(buffer.data<float>(), wire.data<minidp::bf16>(), n);
        kernels::cpu::emulatedLink(onWire.raw(), static_cast<int64_t>(bytes), seconds, ctas);
        if (bf16) kernels::cpu::castFromBf16(wire.data<minidp::bf16>(), buffer.data<float>(), n);
      },
      tag, bytes);
}

void EmulatedCommunicator::broadcast(Tensor& tensor, int root) {
  MINIDP_CHECK(tensor.defined() && supports(tensor.device()), "emulated broadcast of a tensor on the wrong device");
  MINIDP_CHECK(root >= 0 && root < world_, "broadcast from rank " << root << " of " << world_);
}

std::vector<std::string> EmulatedCommunicator::allGather(const std::string& bytes) {
  return std::vector<std::string>(world_, bytes);
}

}  // namespace minidp::distributed
