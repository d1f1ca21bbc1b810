// A comm hook from outside minidp: top-k sparsification with error feedback (Stich et al. 2018; the idea
// behind Deep Gradient Compression). Each rank adds its carried error to the bucket, sends the k entries of
// largest magnitude (ids and values, all-gathered), keeps the rest as the next step's error, and every rank
// adds all ranks' entries in rank order into zeros and divides by the world size: the same bits on every
// rank, whenever the bucket is launched. This example selects on the host, so it serves CPU buckets (a CUDA
// version would launch a selection kernel on the stream Communicator::enqueue hands its task).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "framework/distributed/comm_hook.h"

namespace custom {

namespace dist = minidp::distributed;
using minidp::DType;
using minidp::Tensor;

class TopKHook : public dist::CommHook {
 public:
  /// Sends ceil(fraction x bucket size) entries per bucket and step.
  explicit TopKHook(double fraction) : fraction_(fraction) {}
  std::string name() const override { return "topk"; }

  void setup(const std::vector<dist::GradBucket>& buckets, dist::Communicator& comm) override {
    const int world = comm.worldSize();
    state_.clear();
    for (const dist::GradBucket& b : buckets) {
      MINIDP_CHECK(!b.buffer.isCuda() && b.buffer.dtype() == DType::F32,
                   "--comm-hook topk (examples/custom_hook) selects on the host: fp32 CPU buckets only");
      MINIDP_CHECK(b.reduction == dist::Reduction::AllReduce, "--comm-hook topk all-gathers: not with --zero 1");
      const int64_t n = b.buffer.numel();
      const int64_t k = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(fraction_ * n)), 1, n);
      State s;
      s.error = Tensor::zeros({n}, DType::F32, minidp::Device::CPU);
      s.ids = Tensor::empty({k}, DType::I32, minidp::Device::CPU);
      s.values = Tensor::empty({k}, DType::F32, minidp::Device::CPU);
      s.allIds = Tensor::empty({world * k}, DType::I32, minidp::Device::CPU);
      s.allValues = Tensor::empty({world * k}, DType::F32, minidp::Device::CPU);
      state_.push_back(s);
    }
  }

  std::shared_ptr<dist::Work> reduce(const dist::GradBucket& bucket, dist::Communicator& comm) override {
    const std::string tag = "bucket " + std::to_string(bucket.index);
    const State s = state_.at(bucket.index);
    const Tensor grad = bucket.buffer;
    const int world = comm.worldSize();
    std::vector<std::shared_ptr<dist::Work>> works;
    // On the comm thread, in order with the gathers: select this rank's k largest entries of grad + error.
    works.push_back(comm.enqueue(tag + " select", grad, [s, grad](cudaStream_t) {
      float* g = grad.data<float>();
      float* e = s.error.data<float>();
      const int64_t n = grad.numel(), k = s.ids.numel();
      for (int64_t i = 0; i < n; ++i) g[i] += e[i];
      std::vector<int32_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      // Largest magnitude first, ties by index: the same choice on every run.
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [g](int32_t a, int32_t b) {
        return std::abs(g[a]) != std::abs(g[b]) ? std::abs(g[a]) > std::abs(g[b]) : a < b;
      });
      std::copy(g, g + n, e);  // the error keeps what is not sent
      for (int64_t j = 0; j < k; ++j) {
        s.ids.data<int32_t>()[j] = order[j];
        s.values.data<float>()[j] = g[order[j]];
        e[order[j]] = 0;
      }
    }));
    works.push_back(comm.allGather(s.ids, s.allIds, tag + " ids"));
    works.push_back(comm.allGather(s.values, s.allValues, tag + " values"));
    works.push_back(comm.enqueue(tag + " add", grad, [s, grad, world](cudaStream_t) {
      float* g = grad.data<float>();
      std::fill(g, g + grad.numel(), 0.0f);
      const int64_t all = s.allIds.numel();
      for (int64_t j = 0; j < all; ++j) g[s.allIds.data<int32_t>()[j]] += s.allValues.data<float>()[j];
      for (int64_t i = 0; i < grad.numel(); ++i) g[i] /= static_cast<float>(world);
    }));
    return std::make_shared<dist::WorkChain>(tag, grad.nbytes(), std::move(works));
  }

 private:
  struct State {
    Tensor error, ids, values, allIds, allValues;
  };
  double fraction_;
  std::vector<State> state_;
};

/// Makes --comm-hook topk available (call before the flags are parsed).
inline void registerTopKHook(double fraction) {
  dist::registerCommHook({"topk", "the largest entries of each bucket, error feedback (examples/custom_hook)",
                          [fraction](const dist::CommHookOptions&) { return std::make_unique<TopKHook>(fraction); }});
}

}  // namespace custom
