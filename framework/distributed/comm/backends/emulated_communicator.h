// EmulatedCommunicator: ONE process behaving as N identical ranks joined by a modelled link, for
// measuring how much communication overlap hides when only one device is at hand. Not a real
// multi-rank run: no data leaves the process.
#pragma once

#include <memory>

#include "framework/distributed/comm/communicator.h"

namespace minidp::distributed {

class CommThread;
class CommStream;

/// A world of `world` identical ranks: this process is rank 0 and every other rank holds the same
/// tensors, so an average leaves the bits unchanged, a sum multiplies them by N and an all-gather repeats
/// them. An all-reduce of `bytes` takes the ring's time, latency + 2(N-1)/N * bytes / bandwidth, a
/// reduce-scatter of `bytes` in or an all-gather of `bytes` out latency + (N-1)/N * bytes / bandwidth, really
/// reading and writing the buffer:
/// on the GPU with a bounded number of CTAs on the comm stream (the same event protocol as NCCL), on the
/// CPU on a comm thread that touches the buffer and sleeps. Every comm hook runs on it.
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
  /// An average, maximum or minimum leaves the buffer, a sum multiplies it by N; the ring's time.
  std::shared_ptr<Work> allReduce(Tensor buffer, ReduceOp op, const std::string& tag) override;
  /// Rank 0's shard reduced as allReduce reduces; the ring reduce-scatter's time.
  std::shared_ptr<Work> reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) override;
  /// `input` copied into each of the N slots of `output`; the ring all-gather's time.
  std::shared_ptr<Work> allGather(Tensor input, Tensor output, const std::string& tag) override;
  /// Rank 0's shard copied into every slot (under ZeRO only time and memory are a real run's: kZeroNote).
  std::shared_ptr<Work> allGatherShards(Tensor buffer, const std::string& tag) override;
  std::shared_ptr<Work> enqueue(const std::string& tag, Tensor keep,
                                const std::function<void(cudaStream_t)>& task) override;
  /// Identical ranks: nothing to copy.
  void broadcast(Tensor& tensor, int root) override;
  /// N copies of `bytes`.
  std::vector<std::string> allGather(const std::string& bytes) override;
  void abort() noexcept override {}
  /// Seconds the modelled ring all-reduce of `bytes` takes.
  double modelledSeconds(size_t bytes) const;
  /// What a ZeRO run on this link measures, for its logs.
  static constexpr const char* kZeroNote =
      "ZeRO's gathers repeat rank 0's shard: the values are not a real run's, the step times and the memory are";
  /// Seconds the modelled ring reduce-scatter of `bytes` in, or all-gather of `bytes` out, takes.
  double modelledHalfRingSeconds(size_t bytes) const;

 private:
  /// Runs `local` (the collective's arithmetic on identical ranks), then holds the link for `seconds` while
  /// touching `touched`, on the comm stream or thread.
  std::shared_ptr<Work> transfer(const std::string& tag, Tensor touched, double seconds,
                                 const std::function<void(cudaStream_t)>& local);

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
