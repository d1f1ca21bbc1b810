#include "framework/optim/optimizer.h"

#include "framework/ops/dispatch.h"
#include "kernels/optimizer.h"

namespace minidp::optim {

namespace {
std::vector<Tensor> zerosLike(const std::vector<Variable>& params) {
  std::vector<Tensor> out;
  for (const Variable& p : params) out.push_back(Tensor::zeros(p.shape(), p.dtype(), p.device()));
  return out;
}

void checkGrad(const Variable& p, size_t index) {
  MINIDP_CHECK(p.grad().defined(), "optimizer step: parameter " << index << " has no gradient");
}
}  // namespace

void Optimizer::setParameterNames(std::vector<std::string> names) {
  MINIDP_CHECK(names.size() == params_.size(), names.size() << " names for " << params_.size() << " parameters");
  names_ = std::move(names);
}

std::string Optimizer::stateName(size_t index, const char* kind) const {
  return (names_.empty() ? std::to_string(index) : names_[index]) + "." + kind;
}

Sgd::Sgd(std::vector<Variable> params, double lr, double momentum, double weightDecay)
    : Optimizer(std::move(params), lr), momentum_(momentum), weightDecay_(weightDecay) {
  if (momentum_ != 0) buffers_ = zerosLike(params_);
}

void Sgd::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i];
    checkGrad(p, i);
    Tensor& w = p.data();
    MINIDP_DISPATCH_FLOAT(w.dtype(), T, {
      kernels::SgdParams<T> h{T(lr_), T(momentum_), T(weightDecay_), steps_ == 0};
      T* buf = buffers_.empty() ? nullptr : buffers_[i].data<T>();
      MINIDP_LAUNCH(w, sgdStep<T>, w.data<T>(), p.grad().data<T>(), buf, w.numel(), h);
    });
  }
  ++steps_;
}

Optimizer::State Sgd::state() const {
  State out;
  for (size_t i = 0; i < buffers_.size(); ++i) out.emplace_back(stateName(i, "momentum_buffer"), buffers_[i]);
  return out;
}

AdamW::AdamW(std::vector<Variable> params, double lr, double beta1, double beta2, double eps, double weightDecay)
    : Optimizer(std::move(params), lr), beta1_(beta1), beta2_(beta2), eps_(eps), weightDecay_(weightDecay) {
  m_ = zerosLike(params_);
  v_ = zerosLike(params_);
}

void AdamW::step() {
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i];
    checkGrad(p, i);
    Tensor& w = p.data();
    MINIDP_DISPATCH_FLOAT(w.dtype(), T, {
      kernels::AdamWParams<T> h{T(lr_), T(beta1_), T(beta2_), T(eps_), T(weightDecay_), steps_};
      MINIDP_LAUNCH(w, adamwStep<T>, w.data<T>(), p.grad().data<T>(), m_[i].data<T>(), v_[i].data<T>(),
                    w.numel(), h);
    });
  }
}

Optimizer::State AdamW::state() const {
  State out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back(stateName(i, "exp_avg"), m_[i]);
    out.emplace_back(stateName(i, "exp_avg_sq"), v_[i]);
  }
  return out;
}

std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, std::vector<Variable> params, double lr,
                                         double weightDecay) {
  if (name == "sgd") return std::make_unique<Sgd>(std::move(params), lr, 0.9, weightDecay);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(params), lr, 0.9, 0.999, 1e-8, weightDecay);
  throwError("unknown optimizer '" + name + "' (expected sgd or adamw)", __FILE__, __LINE__);
}

}  // namespace minidp::optim
