#include "framework/optim/optimizer.h"

#include "framework/tensor/dispatch.h"
#include "kernels/optimizer_kernels.h"

namespace minidp::optim {

namespace {
template <typename T>
const kernels::ParamChunk<T>* chunksOf(const Tensor& table) {
  return reinterpret_cast<const kernels::ParamChunk<T>*>(table.raw());
}
template <typename T>
const T* scaleOf(const Tensor& scale) {
  return scale.defined() ? scale.data<T>() : nullptr;
}
}  // namespace

ParamList::ParamList(std::vector<Variable> v) : vars(std::move(v)) {
  for (size_t i = 0; i < vars.size(); ++i) slots.push_back({std::to_string(i), vars[i].data(), vars[i].grad()});
}

ParamList::ParamList(const std::vector<std::pair<std::string, Variable>>& named) {
  for (const auto& [name, var] : named) {
    slots.push_back({name, var.data(), var.grad()});
    vars.push_back(var);
  }
}

ParamList::ParamList(std::vector<ParamSlot> s) : slots(std::move(s)) {}

Optimizer::Optimizer(ParamList params, double lr)
    : lr_(lr), slots_(std::move(params.slots)), vars_(std::move(params.vars)) {
  for (const ParamSlot& s : slots_) {
    MINIDP_CHECK(s.param.defined(), "optimizer: parameter " << s.name << " has no data");
    MINIDP_CHECK(s.param.dtype() == slots_[0].param.dtype() && s.param.device() == slots_[0].param.device(),
                 "optimizer: parameter " << s.name << " differs in dtype or device from " << slots_[0].name);
  }
}

void Optimizer::allocateState(std::vector<std::string> names) {
  stateNames_ = std::move(names);
  state_.assign(stateNames_.size(), {});
  for (std::vector<Tensor>& kind : state_) {
    for (const ParamSlot& s : slots_) kind.push_back(Tensor::zeros(s.param.shape(), s.param.dtype(), s.param.device()));
  }
}

void Optimizer::setGradScale(Tensor scale) {
  if (scale.defined() && !slots_.empty()) {
    const Tensor& p = slots_[0].param;
    MINIDP_CHECK(scale.numel() == 1 && scale.dtype() == p.dtype() && scale.device() == p.device(),
                 "optimizer: the gradient scale must be one element of the parameters' dtype and device");
  }
  gradScale_ = std::move(scale);
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    for (size_t k = 0; k < state_.size(); ++k) out.emplace_back(slots_[i].name + "." + stateNames_[k], state_[k][i]);
  }
  return out;
}

Tensor Optimizer::savedTensor(const SavedState& saved, const std::string& name, const Shape& shape) {
  Tensor t = saved(name);
  MINIDP_CHECK(t.shape() == shape, "optimizer state '" << name << "' has shape " << shapeString(t.shape())
                                                       << ", the optimizer expects " << shapeString(shape));
  return t;
}

void Optimizer::restoreState(const SavedState& saved) {
  for (auto& [name, tensor] : state()) {
    tensor.copyFrom(savedTensor(saved, name, tensor.shape()).toDType(tensor.dtype()).to(tensor.device()));
  }
}

void Optimizer::setStepCount(int64_t steps) {
  MINIDP_CHECK(steps >= 0, "optimizer: step count " << steps << " is negative");
  stepCount_ = steps;
}

void Optimizer::setScalarsOnDevice(bool on) {
  if (on && !scalars_.defined()) {
    // Room for the largest scalars struct (AdamWParams<double>), as raw I32 words on the parameters' device.
    constexpr int64_t words = (sizeof(kernels::AdamWParams<double>) + sizeof(int32_t) - 1) / sizeof(int32_t);
    scalars_ = Tensor::zeros({words}, DType::I32, slots_.empty() ? Device::CPU : slots_[0].param.device());
  }
  scalarsOnDevice_ = on;
}

void Optimizer::stageStep() {
  MINIDP_CHECK(scalarsOnDevice_, "stageStep() without setScalarsOnDevice(true)");
  ++stepCount_;
  storeScalars(scalars_);
}

void Optimizer::storeScalars(const Tensor&) {
  throwError("this optimizer launches no update of its own: its scalars cannot live on the device", __FILE__, __LINE__);
}

void Optimizer::setComputeCopies(CopyOf copyOf) { copyOf_ = std::move(copyOf); }

void Optimizer::refreshTable() {
  std::vector<const void*> pointers;
  std::vector<Tensor> copies;
  for (size_t i = 0; i < slots_.size(); ++i) {
    ParamSlot& s = slots_[i];
    if (!vars_.empty()) {
      s.param = vars_[i].data();
      s.grad = vars_[i].grad();
    }
    MINIDP_CHECK(s.grad.defined(), "optimizer step: parameter " << s.name << " has no gradient");
    MINIDP_CHECK(
        s.grad.numel() == s.param.numel() && s.grad.dtype() == s.param.dtype() && s.grad.device() == s.param.device(),
        "optimizer step: the gradient of " << s.name << " differs from the parameter in size, dtype or device");
    pointers.push_back(s.param.raw());
    pointers.push_back(s.grad.raw());
    copies.push_back(copyOf_ ? copyOf_(s.param) : Tensor());
    const Tensor& copy = copies.back();
    MINIDP_CHECK(!copy.defined() || (copy.dtype() == DType::BF16 && copy.numel() >= s.param.numel() &&
                                     s.param.dtype() == DType::F32 && copy.device() == s.param.device()),
                 "optimizer: the compute copy of " << s.name << " must be bf16 on its device with room for it, "
                                                   << "of an fp32 parameter");
    pointers.push_back(copy.defined() ? copy.raw() : nullptr);
  }
  if (table_.defined() && pointers == tableGrads_) return;
  tableGrads_ = std::move(pointers);
  if (slots_.empty()) return;
  const Tensor& first = slots_[0].param;
  MINIDP_DISPATCH_FLOAT(first.dtype(), T, {
    std::vector<kernels::ParamChunk<T>> chunks;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const ParamSlot& s = slots_[i];
      for (int64_t off = 0; off < s.param.numel(); off += kernels::kParamChunkElements) {
        auto state = [&](size_t k) { return k < state_.size() ? state_[k][i].data<T>() + off : nullptr; };
        bf16* copy = copies[i].defined() ? copies[i].data<bf16>() + off : nullptr;
        chunks.push_back({s.param.data<T>() + off, s.grad.data<T>() + off, state(0), state(1), copy,
                          std::min(kernels::kParamChunkElements, s.param.numel() - off)});
      }
    }
    numChunks_ = static_cast<int64_t>(chunks.size());
    // Raw bytes of the table in an I32 tensor: allocated by the caching allocator on the parameters' device.
    static_assert(sizeof(kernels::ParamChunk<T>) % sizeof(int32_t) == 0);
    table_ = Tensor::fromHost(chunks.data(), {numChunks_ * int64_t(sizeof(chunks[0]) / sizeof(int32_t))}, DType::I32,
                              first.device());
  });
}

void Optimizer::step() {
  refreshTable();
  if (!scalarsOnDevice_) ++stepCount_;  // else stageStep() counted it
  if (numChunks_ > 0) launch(table_, numChunks_);
}

Sgd::Sgd(ParamList params, double lr, double momentum, double weightDecay)
    : Optimizer(std::move(params), lr), momentum_(momentum), weightDecay_(weightDecay) {
  allocateState(momentum_ != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{});
}

template <typename T>
kernels::SgdParams<T> Sgd::scalars() const {
  return {T(lr_), T(momentum_), T(weightDecay_), stepCount() == 1};
}

void Sgd::launch(const Tensor& table, int64_t numChunks) {
  MINIDP_DISPATCH_FLOAT(dtype(), T, {
    const auto* onDevice = static_cast<const kernels::SgdParams<T>*>(deviceScalars());
    MINIDP_LAUNCH(table, sgdMultiStep<T>, chunksOf<T>(table), numChunks, scalars<T>(), onDevice,
                  scaleOf<T>(gradScale()));
  });
}

void Sgd::storeScalars(const Tensor& out) {
  MINIDP_DISPATCH_FLOAT(dtype(), T,
                        MINIDP_LAUNCH(out, storeScalars, scalars<T>(), static_cast<kernels::SgdParams<T>*>(out.raw())));
}

AdamW::AdamW(ParamList params, double lr, double beta1, double beta2, double eps, double weightDecay)
    : Optimizer(std::move(params), lr), beta1_(beta1), beta2_(beta2), eps_(eps), weightDecay_(weightDecay) {
  allocateState({"exp_avg", "exp_avg_sq"});
}

template <typename T>
kernels::AdamWParams<T> AdamW::scalars() const {
  return kernels::adamwParams<T>(lr_, beta1_, beta2_, eps_, weightDecay_, stepCount());
}

void AdamW::launch(const Tensor& table, int64_t numChunks) {
  MINIDP_DISPATCH_FLOAT(dtype(), T, {
    const auto* onDevice = static_cast<const kernels::AdamWParams<T>*>(deviceScalars());
    MINIDP_LAUNCH(table, adamwMultiStep<T>, chunksOf<T>(table), numChunks, scalars<T>(), onDevice,
                  scaleOf<T>(gradScale()));
  });
}

void AdamW::storeScalars(const Tensor& out) {
  MINIDP_DISPATCH_FLOAT(
      dtype(), T, MINIDP_LAUNCH(out, storeScalars, scalars<T>(), static_cast<kernels::AdamWParams<T>*>(out.raw())));
}

std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, ParamList params, double lr, double weightDecay) {
  if (name == "sgd") return std::make_unique<Sgd>(std::move(params), lr, 0.9, weightDecay);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), lr, 0.9, 0.999, 1e-8, weightDecay);
  throwError("unknown optimizer '" + name + "' (expected sgd or adamw)", __FILE__, __LINE__);
}

}  // namespace minidp::optim
