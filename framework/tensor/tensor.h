// Tensor: a typed, contiguous, shaped view of a storage block on the CPU or on a CUDA device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "base/device.h"
#include "base/fp16.h"
#include "base/stream.h"

namespace minidp {

/// Element types. I32 carries token ids and class labels; BF16 is a CUDA compute copy (mixed precision);
/// I8, U8 and F16 are wire formats (a comm hook's quantised or half-precision buffers), which collectives
/// and copies take and the ops do not.
enum class DType : uint8_t { F32, F64, I32, BF16, I8, U8, F16 };
using Shape = std::vector<int64_t>;

/// Bytes per element of `dtype`.
size_t dtypeSize(DType dtype);
/// Short name as safetensors spells it: "F32", "F64", "I32", "BF16", "I8", "U8", "F16".
const char* dtypeName(DType dtype);
/// True for the floating-point types: F32, F64, BF16, F16.
bool isFloatingPoint(DType dtype);
/// "[2, 3, 4]".
std::string shapeString(const Shape& shape);
/// Product of the extents.
int64_t shapeNumel(const Shape& shape);

template <typename T>
constexpr DType dtypeOf();
template <>
constexpr DType dtypeOf<float>() {
  return DType::F32;
}
template <>
constexpr DType dtypeOf<double>() {
  return DType::F64;
}
template <>
constexpr DType dtypeOf<int32_t>() {
  return DType::I32;
}
template <>
constexpr DType dtypeOf<bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtypeOf<int8_t>() {
  return DType::I8;
}
template <>
constexpr DType dtypeOf<uint8_t>() {
  return DType::U8;
}
template <>
constexpr DType dtypeOf<fp16>() {
  return DType::F16;
}

/// A block of memory returned to its allocator when the last tensor using it goes away: the caching
/// allocator's (CUDA) or the host's, or, for memory allocated elsewhere, `release`.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device = Device::CPU;
  /// Frees memory that came from another allocator (Tensor::fromExternal); empty for the built-in ones.
  std::function<void(void*)> release;
  Storage(size_t bytes, Device device);
  Storage(void* ptr, size_t bytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

/// A contiguous tensor. Copies share storage; `clone()` copies data. CUDA work runs on the compute stream.
class Tensor {
 public:
  Tensor() = default;
  /// Uninitialised memory.
  static Tensor empty(const Shape& shape, DType dtype, Device device);
  /// Zero-filled.
  static Tensor zeros(const Shape& shape, DType dtype, Device device);
  /// Copies `numel(shape)` elements from host memory.
  static Tensor fromHost(const void* data, const Shape& shape, DType dtype, Device device);
  template <typename T>
  static Tensor fromVector(const std::vector<T>& values, const Shape& shape, Device device = Device::CPU) {
    MINIDP_CHECK(static_cast<int64_t>(values.size()) == shapeNumel(shape),
                 values.size() << " values for shape " << shapeString(shape));
    return fromHost(values.data(), shape, dtypeOf<T>(), device);
  }
  /// A tensor over memory allocated elsewhere (`ptr`, at least numel(shape) elements on `device`, e.g. a
  /// communicator's registered buffer); `release(ptr)` frees it when the last tensor using it goes away,
  /// on whichever thread drops it, and must not throw.
  static Tensor fromExternal(void* ptr, const Shape& shape, DType dtype, Device device,
                             std::function<void(void*)> release);
  /// A tensor over `numel(shape)` elements of `base`'s storage starting at element `offset` (no copy).
  static Tensor alias(const Tensor& base, int64_t offset, const Shape& shape);

  /// False for a default-constructed tensor.
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  /// Extent of dimension `d`; negative counts from the end.
  int64_t size(int d) const;
  int ndim() const { return static_cast<int>(shape_.size()); }
  /// Number of elements; nbytes() their size in bytes.
  int64_t numel() const { return shapeNumel(shape_); }
  size_t nbytes() const { return numel() * dtypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool isCuda() const { return device_ == Device::CUDA; }
  /// The first element's address (device memory for CUDA tensors).
  void* raw() const;
  /// raw() typed; checks that T matches the dtype.
  template <typename T>
  T* data() const {
    MINIDP_CHECK(dtype_ == dtypeOf<T>(),
                 "tensor holds " << dtypeName(dtype_) << ", asked for " << dtypeName(dtypeOf<T>()));
    return static_cast<T*>(raw());
  }
  /// True when both tensors use the same memory block.
  bool sharesStorage(const Tensor& other) const { return storage_ == other.storage_; }
  /// True when no other tensor (copy or view) uses this tensor's memory block: an in-place write is seen
  /// through this tensor only.
  bool ownsStorageAlone() const { return storage_ != nullptr && storage_.use_count() == 1; }

  /// ZeRO-3 (FSDP's storage resize to 0): frees the memory of this tensor's block but keeps the block, so every
  /// tensor sharing it (a view, an autograd node's saved copy) still refers to it; reading it before
  /// reacquireMemory() is an error. Only for blocks of the built-in allocators (not fromExternal).
  void releaseMemory() const;
  /// Allocates a released block's memory again (uninitialised; its address may change); no-op when resident.
  void reacquireMemory() const;
  /// Whether the block holds memory (not released).
  bool memoryResident() const { return storage_ != nullptr && storage_->ptr != nullptr; }

  /// Same elements under another shape (one extent may be -1).
  Tensor view(Shape shape) const;
  /// A copy on `device` (synchronous when it crosses devices).
  Tensor to(Device device) const;
  /// A copy converted to `dtype` (F32, F64 and BF16 only).
  Tensor toDType(DType dtype) const;
  /// A copy with its own storage.
  Tensor clone() const;
  /// Copies `src` (same shape and dtype, any device) into this tensor; a copy between CUDA tensors is
  /// enqueued on `stream` (null: the compute stream).
  void copyFrom(const Tensor& src, cudaStream_t stream = nullptr);
  /// Sets every element to 0 (CUDA: on `stream`, null: the compute stream).
  void zero(cudaStream_t stream = nullptr);
  /// Host copy of the values (synchronises with the compute stream for CUDA tensors).
  template <typename T>
  std::vector<T> toVector() const {
    std::vector<T> out(numel());
    copyToHost(data<T>(), out.data());
    return out;
  }

 private:
  void copyToHost(const void* src, void* dst) const;
  std::shared_ptr<Storage> storage_;
  int64_t offsetBytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
};

}  // namespace minidp
