// EmulatedCommunicator: ONE process behaving as N identical ranks joined by a modelled link, for
// measuring how much communication overlap hides when only one device is at hand. Not a real
// multi-rank run: no data leaves the process.
#pragma once

#include <memory>

#include "framework/distributed/communicator.h"

namespace minidp::distributed {

class CommThread;
class CommStream;

/// A world of `world` identical ranks: this process is rank 0 and every other rank holds the same
/// tensors, so an average leaves the bits unchanged. An all-reduce of `bytes` takes the ring's time,
/// latency + 2(N-1)/N * bytes / bandwidth, really reading and writing the bucket: on the GPU with a
/// bounded number of CTAs on the comm stream (the same event protocol as NCCL), on the CPU on a comm
/// thread that touches the buffer and sleeps.
class EmulatedCommunicator : public Communicator {
 public:
  /// `ctas` <= 0 picks 16. `cuda` selects the device the link serves.
  EmulatedCommunicator(int world, double gbps, double latencyUs, bool cuda, int ctas, bool commHighPriority);
  ~EmulatedCommunicator() override;
  int rank() const override { return 0; }
  int worldSize() const override { return world_; }
  std::string name() const override { return "emulated"; }
  /// Says that this is an emulation, with N, bandwidth, latency (and CTAs on the GPU).
  std::string describe() const override;
  bool supports(Device device) const override { return (device == Device::CUDA) == cuda_; }
  std::shared_ptr<Work> allReduceAverage(Tensor buffer, const std::string& tag) override;
  /// All-reduce only, nothing `after` it; bf16 on the wire sends (and times) the bf16 copy.
  std::shared_ptr<Work> reduceGradients(Tensor buffer, Tensor wire, Reduction reduction, const std::string& tag,
                                        const AfterReduce& after = {}) override;
  /// Identical ranks: nothing to copy.
  void broadcast(Tensor& tensor, int root) override;
  /// N copies of `bytes`.
  std::vector<std::string> allGather(const std::string& bytes) override;
  void abort() noexcept override {}
  /// Seconds the modelled ring all-reduce of `bytes` takes.
  double modelledSeconds(size_t bytes) const;

 private:
  int world_;
  double gbps_, latencyUs_;
  bool cuda_;
  int ctas_;
  std::unique_ptr<CommThread> thread_;  // CPU link
#if MINIDP_WITH_CUDA
  std::unique_ptr<CommStream> stream_;  // GPU link
#endif
};

}  // namespace minidp::distributed
