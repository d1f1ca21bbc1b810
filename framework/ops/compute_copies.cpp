#include "framework/ops/compute_copies.h"

#include "base/check.h"
#include "framework/tensor/tensor_math.h"

namespace minidp::ops {

namespace {

thread_local WeightCopySource* gInstalled = nullptr;

// Rows and columns of w as a matrix: its first dimension by the rest (a scalar is one row).
int64_t rowsOf(const Tensor& w) { return w.ndim() >= 1 ? w.size(0) : 1; }

// Writes w rounded to bf16 into the first w.numel() elements of `storage`, zeros after them.
void castPadded(const Tensor& w, const Tensor& storage) {
  Tensor head = Tensor::alias(storage, 0, w.shape());
  castInto(w, head);
  if (storage.numel() > w.numel()) Tensor::alias(storage, w.numel(), {storage.numel() - w.numel()}).zero();
}

// A copy's shape: w's own (rows 0), else `rows` (at least w's) by w's columns (the product of its other dims).
Shape copyShape(const Tensor& w, int64_t rows) {
  if (rows == 0) return w.shape();
  const int64_t own = rowsOf(w);
  MINIDP_CHECK(rows >= own, "weightCopy: " << rows << " rows for a weight of " << own);
  int64_t columns = 1;
  for (size_t i = 1; i < w.shape().size(); ++i) columns *= w.shape()[i];
  return {rows, columns};
}

}  // namespace

ComputeCopies::ComputeCopies(const std::vector<Tensor>& params) {
  for (const Tensor& p : params) {
    if (p.dtype() == DType::F32 && p.numel() > 0) entries_.emplace(p.raw(), Entry{p, Tensor()});
  }
}

const ComputeCopies::Entry* ComputeCopies::entryOf(const Tensor& param) const {
  const auto it = entries_.find(param.raw());
  return it == entries_.end() || it->second.param.numel() != param.numel() ? nullptr : &it->second;
}

Tensor ComputeCopies::get(const Tensor& param, int64_t rows) {
  Entry* const e = const_cast<Entry*>(entryOf(param));
  if (e == nullptr) return {};
  const Shape shape = copyShape(param, rows);
  const int64_t numel = shapeNumel(shape);
  if (!e->storage.defined() || e->storage.numel() < numel) {
    // Made, or made again with more rows; an op that holds the old copy keeps it (its values are current).
    if (frozen_) return {};
    e->storage = Tensor::empty({numel}, DType::BF16, param.device());
    castPadded(e->param, e->storage);
  }
  return Tensor::alias(e->storage, 0, shape);
}

Tensor ComputeCopies::find(const Tensor& param) const {
  const Entry* e = entryOf(param);
  return e == nullptr ? Tensor() : e->storage;
}

void ComputeCopies::refresh() {
  for (auto& [ptr, e] : entries_) {
    if (e.storage.defined()) castPadded(e.param, e.storage);
  }
}

WeightCopySource::Installed::Installed(WeightCopySource* source) : previous_(gInstalled) { gInstalled = source; }

WeightCopySource::Installed::~Installed() { gInstalled = previous_; }

Tensor weightCopy(const Tensor& w, int64_t rows) {
  if (gInstalled != nullptr) {
    Tensor copy = gInstalled->get(w, rows);
    if (copy.defined()) return copy;
  }
  if (rows == 0) return cast(w, DType::BF16);  // a bf16 weight is its own copy
  const Shape shape = copyShape(w, rows);
  Tensor out = Tensor::empty({shapeNumel(shape)}, DType::BF16, w.device());
  castPadded(w, out);
  return Tensor::alias(out, 0, shape);
}

}  // namespace minidp::ops
