#include "framework/ops/compute_copies.h"

#include "base/check.h"
#include "framework/tensor/tensor_math.h"

namespace minidp::ops {

namespace {

thread_local ComputeCopies* gInstalled = nullptr;

// Rows and columns of w as a matrix: its first dimension by the rest (a scalar is one row).
int64_t rowsOf(const Tensor& w) { return w.ndim() >= 1 ? w.size(0) : 1; }

// Writes w rounded to bf16 into the first w.numel() elements of `storage`, zeros after them.
void castPadded(const Tensor& w, const Tensor& storage) {
  Tensor head = Tensor::alias(storage, 0, w.shape());
  castInto(w, head);
  if (storage.numel() > w.numel()) Tensor::alias(storage, w.numel(), {storage.numel() - w.numel()}).zero();
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
  Entry* const found = const_cast<Entry*>(entryOf(param));
  if (found == nullptr) return {};
  Entry& e = *found;
  const int64_t own = rowsOf(param), columns = param.numel() / own, wanted = rows == 0 ? own : rows;
  MINIDP_CHECK(wanted >= own, "weightCopy: " << rows << " rows for a parameter of " << own);
  if (!e.storage.defined() || e.storage.numel() < wanted * columns) {
    // Made, or made again with more rows; an op that holds the old copy keeps it (its values are current).
    if (frozen_) return {};
    e.storage = Tensor::empty({wanted * columns}, DType::BF16, param.device());
    castPadded(e.param, e.storage);
  }
  return rows == 0 ? Tensor::alias(e.storage, 0, param.shape()) : Tensor::alias(e.storage, 0, {wanted, columns});
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

ComputeCopies::Installed::Installed(ComputeCopies* copies) : previous_(gInstalled) { gInstalled = copies; }

ComputeCopies::Installed::~Installed() { gInstalled = previous_; }

Tensor weightCopy(const Tensor& w, int64_t rows) {
  if (gInstalled != nullptr) {
    Tensor copy = gInstalled->get(w, rows);
    if (copy.defined()) return copy;
  }
  const int64_t own = rowsOf(w);
  if (rows == 0 || rows == own) return cast(w, DType::BF16);
  MINIDP_CHECK(rows > own, "weightCopy: " << rows << " rows for a weight of " << own);
  const int64_t columns = w.numel() / own;
  Tensor out = Tensor::empty({rows, columns}, DType::BF16, w.device());
  castPadded(w, Tensor::alias(out, 0, {rows * columns}));
  return out;
}

}  // namespace minidp::ops
