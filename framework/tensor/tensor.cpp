#include "framework/tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <utility>

#include "framework/runtime/device.h"
#include "kernels/convert.h"

#if MINIDP_WITH_CUDA
#include "base/cuda_check.h"
#endif

namespace minidp {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::BF16: return 2;
    case DType::I8: return 1;
    case DType::U8: return 1;
    case DType::F16: return 2;
  }
  throwError("unknown dtype", __FILE__, __LINE__);
}

const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::BF16: return "BF16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::F16: return "F16";
  }
  return "?";
}

bool isFloatingPoint(DType dtype) {
  switch (dtype) {
    case DType::F32:
    case DType::F64:
    case DType::BF16:
    case DType::F16: return true;
    case DType::I32:
    case DType::I8:
    case DType::U8: return false;
  }
  return false;
}

std::string shapeString(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t shapeNumel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

void* allocateBlock(size_t bytes, Device device) {
  if (device == Device::CUDA) return runtime::deviceAllocate(bytes);
  // 64-byte alignment for Eigen's vectorised loads; aligned_alloc wants a multiple of the alignment.
  void* ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  MINIDP_CHECK(ptr != nullptr, "out of host memory allocating " << bytes << " bytes");
  return ptr;
}

void releaseBlock(void* ptr, size_t bytes, Device device) {
  if (!ptr) return;  // released already (Tensor::releaseMemory)
  if (device == Device::CUDA) {
    runtime::deviceRelease(ptr, bytes);
  } else {
    std::free(ptr);
  }
}

}  // namespace

Storage::Storage(size_t bytes_, Device device_) : bytes(bytes_), device(device_) { ptr = allocateBlock(bytes, device); }

Storage::Storage(void* ptr_, size_t bytes_, Device device_, std::function<void(void*)> release_)
    : ptr(ptr_), bytes(bytes_), device(device_), release(std::move(release_)) {
  MINIDP_CHECK(ptr != nullptr && release, "external storage needs memory and a function that releases it");
}

Storage::~Storage() {
  if (release) {
    release(ptr);
  } else {
    releaseBlock(ptr, bytes, device);
  }
}

void Tensor::releaseMemory() const {
  MINIDP_CHECK(defined() && !storage_->release, "releaseMemory: only a block of the built-in allocators");
  releaseBlock(std::exchange(storage_->ptr, nullptr), storage_->bytes, storage_->device);
}

void Tensor::reacquireMemory() const {
  MINIDP_CHECK(defined(), "reacquireMemory of an undefined tensor");
  if (!storage_->ptr) storage_->ptr = allocateBlock(storage_->bytes, storage_->device);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) MINIDP_CHECK(d >= 0, "negative extent in shape " << shapeString(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(shapeNumel(shape) * dtypeSize(dtype), device);
  return t;
}

Tensor Tensor::fromExternal(void* ptr, const Shape& shape, DType dtype, Device device,
                            std::function<void(void*)> release) {
  for (int64_t d : shape) MINIDP_CHECK(d >= 0, "negative extent in shape " << shapeString(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(ptr, shapeNumel(shape) * dtypeSize(dtype), device, std::move(release));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::fromHost(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes() == 0) return t;  // an empty tensor: `data` may be null, and memcpy must not see a null pointer
  if (device == Device::CPU) {
    std::memcpy(t.raw(), data, t.nbytes());
  } else {
#if MINIDP_WITH_CUDA
    // Pageable source: cudaMemcpyAsync returns once the source was staged, so `data` may go away.
    CUDA_CHECK(cudaMemcpyAsync(t.raw(), data, t.nbytes(), cudaMemcpyHostToDevice, runtime::computeStream()));
#endif
  }
  return t;
}

Tensor Tensor::alias(const Tensor& base, int64_t offset, const Shape& shape) {
  MINIDP_CHECK(base.defined(), "alias of an undefined tensor");
  MINIDP_CHECK(offset >= 0 && offset + shapeNumel(shape) <= base.numel(),
               "alias of " << shapeNumel(shape) << " elements at " << offset << " exceeds base of " << base.numel());
  Tensor t = base;
  t.offsetBytes_ = base.offsetBytes_ + offset * static_cast<int64_t>(dtypeSize(base.dtype_));
  t.shape_ = shape;
  return t;
}

int64_t Tensor::size(int d) const {
  const int n = ndim();
  const int i = d < 0 ? d + n : d;
  MINIDP_CHECK(i >= 0 && i < n, "dimension " << d << " of shape " << shapeString(shape_));
  return shape_[i];
}

void* Tensor::raw() const {
  MINIDP_CHECK(defined(), "undefined tensor");
  MINIDP_CHECK(storage_->ptr, "tensor " << shapeString(shape_) << " read while its memory is released (ZeRO-3: a unit "
                                        "used outside its gather)");
  return static_cast<char*>(storage_->ptr) + offsetBytes_;
}

Tensor Tensor::view(Shape shape) const {
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MINIDP_CHECK(inferred < 0, "more than one -1 in view " << shapeString(shape));
      inferred = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    MINIDP_CHECK(known > 0 && numel() % known == 0,
                 "cannot view " << shapeString(shape_) << " as " << shapeString(shape));
    shape[inferred] = numel() / known;
  }
  MINIDP_CHECK(shapeNumel(shape) == numel(), "cannot view " << shapeString(shape_) << " as " << shapeString(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copyFrom(*this);
  return t;
}

Tensor Tensor::toDType(DType dtype) const {
  if (dtype == dtype_) return clone();
  const auto convertible = [](DType d) { return d == DType::F32 || d == DType::F64 || d == DType::BF16; };
  MINIDP_CHECK(convertible(dtype) && convertible(dtype_),
               "toDType converts F32, F64 and BF16, not " << dtypeName(dtype_) << " to " << dtypeName(dtype));
  Tensor host = to(Device::CPU);
  Tensor out = empty(shape_, dtype, Device::CPU);
  // From and To bound by the two dtypes; the pair is never equal here (equal dtypes returned above).
  const auto typed = [](DType d, auto f) {
    switch (d) {
      case DType::F32: return f(float{});
      case DType::F64: return f(double{});
      case DType::BF16:
      case DType::I32:
      case DType::I8:
      case DType::U8:
      case DType::F16: break;  // BF16: the check above let no other through
    }
    return f(bf16{});
  };
  typed(dtype_, [&](auto from) {
    typed(dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      if constexpr (!std::is_same_v<From, To>) kernels::cpu::convert(host.data<From>(), out.data<To>(), numel());
    });
  });
  return out.to(device_);
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  t.copyFrom(*this);
  return t;
}

void Tensor::copyFrom(const Tensor& src, cudaStream_t onStream) {
  MINIDP_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy of " << dtypeName(src.dtype_)
                                                                        << shapeString(src.shape_) << " into "
                                                                        << dtypeName(dtype_) << shapeString(shape_));
  if (device_ == Device::CPU && src.device_ == Device::CPU) {
    std::memmove(raw(), src.raw(), nbytes());
    return;
  }
#if MINIDP_WITH_CUDA
  cudaStream_t stream = onStream ? onStream : runtime::computeStream();
  if (device_ == Device::CPU) {
    CUDA_CHECK(cudaMemcpyAsync(raw(), src.raw(), nbytes(), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {
    CUDA_CHECK(cudaMemcpyAsync(raw(), src.raw(), nbytes(), cudaMemcpyDefault, stream));
  }
#else
  (void)onStream;
#endif
}

void Tensor::zero(cudaStream_t stream) {
  if (device_ == Device::CPU) {
    std::memset(raw(), 0, nbytes());
    return;
  }
#if MINIDP_WITH_CUDA
  CUDA_CHECK(cudaMemsetAsync(raw(), 0, nbytes(), stream ? stream : runtime::computeStream()));
#else
  (void)stream;
#endif
}

void Tensor::copyToHost(const void* src, void* dst) const {
  if (nbytes() == 0) return;  // nothing to copy, and either pointer may be null
  if (device_ == Device::CPU) {
    std::memcpy(dst, src, nbytes());
    return;
  }
#if MINIDP_WITH_CUDA
  cudaStream_t stream = runtime::computeStream();
  CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
#endif
}

}  // namespace minidp
