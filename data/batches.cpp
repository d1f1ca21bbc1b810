#include "data/batches.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "data/text.h"
#include "framework/runtime/device.h"

#if MINIDP_WITH_CUDA
#include "base/cuda_check.h"
#endif

namespace minidp {

namespace {

class ImageBatches : public BatchSource {
 public:
  ImageBatches(const ImageDataset& data, int64_t batch, int rank, int world, uint64_t seed, DType dtype)
      : data_(data),
        batch_(batch),
        rank_(rank),
        world_(world),
        dtype_(dtype),
        sampler_(data.count, batch * world, seed) {
    MINIDP_CHECK(dtype == DType::F32 || dtype == DType::F64, "image batches are float32 or float64");
  }
  Shape inputShape() const override { return {batch_, data_.rows * data_.cols}; }
  DType inputDType() const override { return dtype_; }
  Shape targetShape() const override { return {batch_}; }
  void fill(void* inputs, int32_t* targets) override {
    const auto rows = EpochSampler::shard(sampler_.nextGlobalBatch(), rank_, world_);
    if (dtype_ == DType::F32) {
      gatherImages(data_, rows, static_cast<float*>(inputs), targets);
      return;
    }
    // float64 runs: widen on the host, so the device never converts.
    staging_.resize(shapeNumel(inputShape()));
    gatherImages(data_, rows, staging_.data(), targets);
    std::copy(staging_.begin(), staging_.end(), static_cast<double*>(inputs));
  }

 private:
  const ImageDataset& data_;
  int64_t batch_;
  int rank_, world_;
  DType dtype_;
  EpochSampler sampler_;
  std::vector<float> staging_;
};

class WindowBatches : public BatchSource {
 public:
  WindowBatches(const std::vector<int32_t>& tokens, int64_t batch, int context, int rank, int world, uint64_t seed)
      : tokens_(tokens),
        batch_(batch),
        context_(context),
        rank_(rank),
        world_(world),
        sampler_(static_cast<int64_t>(tokens.size()), context, batch * world, seed) {}
  Shape inputShape() const override { return {batch_, context_}; }
  DType inputDType() const override { return DType::I32; }
  Shape targetShape() const override { return {batch_, context_}; }
  void fill(void* inputs, int32_t* targets) override {
    const auto offsets = EpochSampler::shard(sampler_.nextGlobalBatch(), rank_, world_);
    gatherWindows(tokens_, offsets, context_, static_cast<int32_t*>(inputs), targets);
  }

 private:
  const std::vector<int32_t>& tokens_;
  int64_t batch_;
  int context_, rank_, world_;
  WindowSampler sampler_;
};

}  // namespace

std::unique_ptr<BatchSource> imageBatches(const ImageDataset& data, int64_t batch, int rank, int world, uint64_t seed,
                                          DType dtype) {
  return std::make_unique<ImageBatches>(data, batch, rank, world, seed, dtype);
}

std::unique_ptr<BatchSource> windowBatches(const std::vector<int32_t>& tokens, int64_t batch, int context, int rank,
                                           int world, uint64_t seed) {
  return std::make_unique<WindowBatches>(tokens, batch, context, rank, world, seed);
}

struct Prefetcher::Slot {
  void* hostInputs = nullptr;  // pinned on CUDA
  int32_t* hostTargets = nullptr;
  Batch batch;  // device tensors, allocated once
#if MINIDP_WITH_CUDA
  cudaEvent_t copied = nullptr;    // on the copy stream: the H2D copy finished
  cudaEvent_t consumed = nullptr;  // on the compute stream: the step using this slot was enqueued before it
#endif
};

Prefetcher::Prefetcher(std::unique_ptr<BatchSource> source, Device device)
    : source_(std::move(source)), device_(device) {
  const size_t inBytes = shapeNumel(source_->inputShape()) * dtypeSize(source_->inputDType());
  const size_t tgtBytes = shapeNumel(source_->targetShape()) * sizeof(int32_t);
  for (int i = 0; i < 2; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->batch.inputs = Tensor::empty(source_->inputShape(), source_->inputDType(), device_);
    slot->batch.targets = Tensor::empty(source_->targetShape(), DType::I32, device_);
    if (device_ == Device::CUDA) {
#if MINIDP_WITH_CUDA
      slot->hostInputs = runtime::pinnedAllocate(inBytes);
      slot->hostTargets = static_cast<int32_t*>(runtime::pinnedAllocate(tgtBytes));
      CUDA_CHECK(cudaEventCreateWithFlags(&slot->copied, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&slot->consumed, cudaEventDisableTiming));
      // The slot's device memory came from the compute stream's allocator: the first copy into it waits
      // for whatever the compute stream had enqueued on that block before.
      CUDA_CHECK(cudaEventRecord(slot->consumed, runtime::computeStream()));
#endif
    }
    slots_.push_back(std::move(slot));
  }
}

Prefetcher::~Prefetcher() {
#if MINIDP_WITH_CUDA
  if (device_ != Device::CUDA) return;
  const cudaError_t status = cudaStreamSynchronize(runtime::copyStream());
  if (status != cudaSuccess) {
    std::fprintf(stderr, "minidp: waiting for the copy stream failed: %s\n", cudaGetErrorString(status));
  }
  for (auto& slot : slots_) {
    runtime::pinnedRelease(slot->hostInputs);
    runtime::pinnedRelease(slot->hostTargets);
    cudaEventDestroy(slot->copied);
    cudaEventDestroy(slot->consumed);
  }
#endif
}

void Prefetcher::prefetch() {
  if (staged_ >= 0) return;
  Slot& slot = *slots_[nextSlot_];
  if (device_ == Device::CPU) {
    source_->fill(slot.batch.inputs.raw(), slot.batch.targets.data<int32_t>());
  } else {
#if MINIDP_WITH_CUDA
    // The pinned buffer is free once its previous copy finished. This is the pipeline's back-pressure: the
    // host waits here only when it runs two batches ahead of the device, never for the current step.
    CUDA_CHECK(cudaEventSynchronize(slot.copied));
    source_->fill(slot.hostInputs, slot.hostTargets);
    cudaStream_t copy = runtime::copyStream();
    // Do not overwrite device memory that an enqueued step still reads.
    CUDA_CHECK(cudaStreamWaitEvent(copy, slot.consumed, 0));
    if (timer_) timer_->beginCopy(copy);
    CUDA_CHECK(cudaMemcpyAsync(slot.batch.inputs.raw(), slot.hostInputs, slot.batch.inputs.nbytes(),
                               cudaMemcpyHostToDevice, copy));
    CUDA_CHECK(cudaMemcpyAsync(slot.batch.targets.raw(), slot.hostTargets, slot.batch.targets.nbytes(),
                               cudaMemcpyHostToDevice, copy));
    if (timer_) timer_->endCopy(copy, "H2D next batch");
    CUDA_CHECK(cudaEventRecord(slot.copied, copy));
#endif
  }
  staged_ = nextSlot_;
  nextSlot_ = 1 - nextSlot_;
}

void Prefetcher::skip(int64_t batches) {
  MINIDP_CHECK(staged_ < 0 && nextSlot_ == 0, "Prefetcher::skip after batches were handed out");
  std::vector<uint8_t> inputs(shapeNumel(source_->inputShape()) * dtypeSize(source_->inputDType()));
  std::vector<int32_t> targets(shapeNumel(source_->targetShape()));
  for (int64_t i = 0; i < batches; ++i) source_->fill(inputs.data(), targets.data());
}

Batch Prefetcher::next() {
  prefetch();
  const int index = staged_;
  Slot& slot = *slots_[index];
  staged_ = -1;
#if MINIDP_WITH_CUDA
  if (device_ == Device::CUDA) {
    cudaStream_t compute = runtime::computeStream();
    CUDA_CHECK(cudaStreamWaitEvent(compute, slot.copied, 0));
    // Work enqueued on the compute stream after the other slot's last use: recorded here so that the copy
    // into the other slot (next prefetch) waits for the step that read it.
    CUDA_CHECK(cudaEventRecord(slots_[1 - index]->consumed, compute));
  }
#endif
  return slot.batch;
}

}  // namespace minidp
