#include "framework/autograd/variable.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "framework/tensor/tensor_math.h"

namespace minidp {

namespace {
thread_local bool gGradMode = true;
// The inputs of the node whose backward runs on this thread, which of them the op accumulated into
// directly through leafGradTarget or heldGradTarget, and the gradients the engine holds for non-leaf nodes.
thread_local const std::vector<Variable>* gBackwardInputs = nullptr;
thread_local std::vector<bool>* gTakenGrads = nullptr;
thread_local std::unordered_map<const void*, Tensor>* gHeldGrads = nullptr;

// Publishes a node's inputs to leafGradTarget and heldGradTarget while its backward runs.
class BackwardScope {
 public:
  BackwardScope(const std::vector<Variable>& inputs, std::vector<bool>& taken,
                std::unordered_map<const void*, Tensor>& held) {
    gBackwardInputs = &inputs;
    gTakenGrads = &taken;
    gHeldGrads = &held;
  }
  ~BackwardScope() {
    gBackwardInputs = nullptr;
    gTakenGrads = nullptr;
    gHeldGrads = nullptr;
  }
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;
};
}  // namespace

bool gradModeEnabled() { return gGradMode; }
NoGradGuard::NoGradGuard() : previous_(gGradMode) { gGradMode = false; }
NoGradGuard::~NoGradGuard() { gGradMode = previous_; }

Variable::Variable(Tensor data, bool requiresGrad) : impl_(std::make_shared<Impl>()) {
  impl_->data = std::move(data);
  impl_->requiresGrad = requiresGrad;
}

bool recordsBackward(const std::vector<Variable>& inputs) {
  return gGradMode && std::any_of(inputs.begin(), inputs.end(),
                                  [](const Variable& in) { return in.defined() && in.requiresGrad(); });
}

Variable Variable::fromOp(Tensor data, std::vector<Variable> inputs, BackwardFn backward) {
  const bool needsGrad = recordsBackward(inputs);
  Variable out(std::move(data), needsGrad);
  if (needsGrad) {
    out.impl_->inputs = std::move(inputs);
    out.impl_->backward = std::move(backward);
  }
  return out;
}

Tensor leafGradTarget(size_t index, bool* zero) {
  if (zero) *zero = false;
  MINIDP_CHECK(gBackwardInputs != nullptr, "leafGradTarget is only valid inside an op's backward");
  MINIDP_CHECK(index < gBackwardInputs->size(),
               "leafGradTarget(" << index << ") for an op with " << gBackwardInputs->size() << " inputs");
  const Variable& input = (*gBackwardInputs)[index];
  if (!input.defined() || !input.requiresGrad() || !input.isLeaf() || !input.grad().defined()) return Tensor();
  (*gTakenGrads)[index] = true;
  if (zero) {
    // Zeros to overwrite only when this op writes the gradient once: a leaf it takes at two inputs gets
    // two contributions, in an order the op chooses.
    *zero = input.gradKnownZero() && std::count_if(gBackwardInputs->begin(), gBackwardInputs->end(),
                                                   [&](const Variable& v) { return v.id() == input.id(); }) == 1;
  }
  return input.grad();
}

Tensor heldGradTarget(size_t index) {
  MINIDP_CHECK(gBackwardInputs != nullptr, "heldGradTarget is only valid inside an op's backward");
  MINIDP_CHECK(index < gBackwardInputs->size(),
               "heldGradTarget(" << index << ") for an op with " << gBackwardInputs->size() << " inputs");
  const Variable& input = (*gBackwardInputs)[index];
  if (!input.defined() || !input.requiresGrad() || input.isLeaf()) return Tensor();
  const auto it = gHeldGrads->find(input.id());
  if (it == gHeldGrads->end()) return Tensor();
  const Tensor& g = it->second;
  // Only memory the engine holds alone may be added into: a gradient shared with another holder (an add's
  // backward passes one tensor to both inputs) must keep its value.
  if (!g.defined() || !g.ownsStorageAlone() || g.shape() != input.shape() || g.dtype() != input.dtype() ||
      g.device() != input.device()) {
    return Tensor();
  }
  (*gTakenGrads)[index] = true;
  return g;
}

void Variable::setBeforeUse(std::function<void()> hook) { impl_->beforeUse = std::move(hook); }

void Variable::runBeforeUse() const {
  const std::function<void()> hook = std::exchange(impl_->beforeUse, nullptr);  // once, even if it throws
  hook();
}

void Variable::setGrad(Tensor grad) {
  MINIDP_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
               "gradient " << dtypeName(grad.dtype()) << shapeString(grad.shape()) << " does not match variable "
                           << dtypeName(dtype()) << shapeString(shape()));
  impl_->grad = std::move(grad);
  impl_->gradZero = false;
}

void Variable::zeroGrad() {
  if (impl_->grad.defined()) impl_->grad.zero();
}

void Variable::releaseGrad() {
  impl_->grad = Tensor();
  impl_->gradZero = false;
}

void Variable::markGradZero() {
  MINIDP_CHECK(impl_->grad.defined(), "markGradZero on a variable without a gradient");
  impl_->gradZero = true;
}

Variable::HookHandle Variable::addGradReadyHook(GradReadyHook hook) {
  const HookHandle handle = impl_->nextHook++;
  impl_->hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Variable::removeGradReadyHook(HookHandle handle) {
  auto& hooks = impl_->hooks;
  const auto it = std::find_if(hooks.begin(), hooks.end(), [handle](const auto& h) { return h.first == handle; });
  MINIDP_CHECK(it != hooks.end(), "removeGradReadyHook: no hook with handle " << handle);
  hooks.erase(it);
}

/// The backward pass: an iterative topological sort, then nodes in reverse order; each node's
/// pending-consumer count decides when a leaf's gradient is final and its hooks fire.
class BackwardEngine {
 public:
  static void run(Variable& root, const Tensor& seed) {
    using Impl = Variable::Impl;
    MINIDP_CHECK(root.requiresGrad(), "backward from a variable that does not require grad");
    MINIDP_CHECK(!root.impl_->released,
                 "backward through a graph that was already freed: each backward frees "
                 "the graph it ran through (run the forward again)");
    if (root.isLeaf()) {
      accumulateLeaf(*root.impl_, seed);
      for (auto& hook : root.impl_->hooks) hook.second(root);
      return;
    }
    // Iterative DFS post-order: a node is emitted after all of its inputs. `order` owns the nodes, since
    // freeing a node's inputs below would otherwise destroy nodes still waiting in the list.
    std::vector<std::shared_ptr<Impl>> order;
    std::unordered_map<Impl*, int> pending;  // consumer edges still owing a gradient
    std::vector<std::pair<std::shared_ptr<Impl>, size_t>> stack{{root.impl_, 0}};
    pending[root.impl_.get()] = 0;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        std::shared_ptr<Impl> child = node->inputs[next++].impl_;
        if (!child || !child->requiresGrad) continue;
        MINIDP_CHECK(!child->released,
                     "backward through a graph that was already freed: each backward frees "
                     "the graph it ran through (run the forward again)");
        auto [it, inserted] = pending.emplace(child.get(), 0);
        ++it->second;
        if (inserted) stack.emplace_back(std::move(child), 0);
      } else {
        order.push_back(std::move(node));
        stack.pop_back();
      }
    }
    std::unordered_map<const void*, Tensor> grads;  // gradients of non-leaf nodes, by node
    grads[root.impl_.get()] = seed;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Impl* node = it->get();
      if (!node->backward) continue;  // leaves receive, they do not propagate
      Tensor gradOut = std::move(grads[node]);
      grads.erase(node);
      std::vector<bool> taken(node->inputs.size(), false);
      std::vector<Tensor> inGrads;
      {
        BackwardScope scope(node->inputs, taken, grads);
        inGrads = node->backward(gradOut);
      }
      MINIDP_CHECK(inGrads.size() == node->inputs.size(),
                   "backward returned " << inGrads.size() << " gradients for " << node->inputs.size() << " inputs");
      for (size_t i = 0; i < inGrads.size(); ++i) {
        Variable& input = node->inputs[i];
        Impl* in = input.impl_.get();
        if (!in || !in->requiresGrad) continue;
        MINIDP_CHECK(inGrads[i].defined() != taken[i],
                     (taken[i] ? "an op added into an input's gradient (leafGradTarget or heldGradTarget) and also returned one"
                               : "an op returned no gradient for an input that requires it"));
        if (taken[i]) {
          // the op accumulated into the leaf's installed gradient (leafGradTarget), or into the gradient the
          // engine holds for a non-leaf input (heldGradTarget), itself
          in->gradZero = false;
        } else if (input.isLeaf()) {
          accumulateLeaf(*in, inGrads[i]);
        } else {
          // In place when the engine holds g's memory alone (it made g by an earlier add, or the op that
          // returned g dropped its last other reference); out of place when g is shared, e.g. an add's
          // backward passing one gradient to both inputs. Same arithmetic either way: g + inGrads[i].
          Tensor& g = grads[in];
          if (!g.defined()) {
            g = inGrads[i];
          } else if (g.ownsStorageAlone()) {
            ops::addInPlace(g, inGrads[i]);
          } else {
            g = ops::add(g, inGrads[i]);
          }
        }
        if (--pending[in] == 0 && input.isLeaf()) {
          for (auto& hook : in->hooks) hook.second(input);
        }
      }
      // Free the graph as we go: captured activations are released after their last use.
      node->inputs.clear();
      node->backward = nullptr;
      node->released = true;
    }
  }

 private:
  static void accumulateLeaf(Variable::Impl& leaf, const Tensor& g) {
    leaf.gradZero = false;
    if (!leaf.grad.defined()) {
      leaf.grad = g.clone();
    } else {
      ops::addInPlace(leaf.grad, g);
    }
  }
};

void Variable::backward() {
  MINIDP_CHECK(impl_->data.numel() == 1, "backward() without a gradient needs a scalar, got " << shapeString(shape()));
  backward(ops::full(shape(), 1.0, dtype(), device()));
}

void Variable::backward(const Tensor& gradOutput) {
  MINIDP_CHECK(gradOutput.shape() == shape(),
               "output gradient " << shapeString(gradOutput.shape()) << " for output " << shapeString(shape()));
  BackwardEngine::run(*this, gradOutput);
}

}  // namespace minidp
