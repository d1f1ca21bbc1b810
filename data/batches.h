// Batches for the trainer: a rank's shard of each global batch, copied to the device on the copy stream
// from pinned memory while the previous step computes.
#pragma once

#include <memory>
#include <vector>

#include "data/fashion_mnist.h"
#include "data/sampler.h"
#include "framework/runtime/step_timer.h"
#include "framework/tensor/tensor.h"

namespace minidp {

/// Inputs and int32 targets of one rank's batch.
struct Batch {
  Tensor inputs;
  Tensor targets;
};

/// Produces, in order, this rank's rows of every global batch (same seed, same global batch for any world).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Shape and dtype of one rank's inputs and targets.
  virtual Shape inputShape() const = 0;
  virtual DType inputDType() const = 0;
  virtual Shape targetShape() const = 0;
  /// Fills the next batch of this rank into host memory of inputShape() / targetShape().
  virtual void fill(void* inputs, int32_t* targets) = 0;
};

/// Images (as `dtype`, float32 or float64) and labels; rank r takes rows [r*B, (r+1)*B) of each shuffled
/// global batch of world*B rows.
std::unique_ptr<BatchSource> imageBatches(const ImageDataset& data, int64_t batch, int rank, int world, uint64_t seed,
                                          DType dtype = DType::F32);
/// Random windows of `context` tokens (targets shifted by one), sharded the same way.
std::unique_ptr<BatchSource> windowBatches(const std::vector<int32_t>& tokens, int64_t batch, int context, int rank,
                                           int world, uint64_t seed);

/// Double-buffered staging: `prefetch()` gathers the next batch into pinned memory and starts its
/// host-to-device copy on the copy stream; `next()` hands it out with the compute stream waiting on the
/// copy's event. Slots are reused only after the compute stream has passed the step that used them.
class Prefetcher {
 public:
  Prefetcher(std::unique_ptr<BatchSource> source, Device device);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  /// The next batch (prefetching it first if needed), on the device.
  Batch next();
  /// Starts staging the batch after the one `next()` returned last; call once the step is enqueued.
  void prefetch();
  /// Draws and drops the next `batches` batches (a resumed run continues the sampler where it stopped);
  /// before the first next() only.
  void skip(int64_t batches);
  /// Brackets each host-to-device copy with copy-track marks of `timer` (null: none); it must outlive
  /// this Prefetcher's use of it.
  void setTimer(runtime::StepTimer* timer) { timer_ = timer; }

 private:
  struct Slot;
  std::unique_ptr<BatchSource> source_;
  Device device_;
  std::vector<std::unique_ptr<Slot>> slots_;
  int staged_ = -1;  // slot holding a prefetched batch, or -1
  int nextSlot_ = 0;
  runtime::StepTimer* timer_ = nullptr;
};

}  // namespace minidp
