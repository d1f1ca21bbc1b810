// A comm hook from outside minidp: top-k sparsification with error feedback (Stich et al. 2018; the idea
// behind Deep Gradient Compression). Each rank adds its carried error to the bucket, sends the k entries of
// largest magnitude (ids and values, all-gathered), keeps the rest as the next step's error, and every rank
// adds all ranks' entries in rank order into zeros and divides by the world size: the same bits on every
// rank, whenever the bucket is launched. This example selects on the host, so it serves CPU buckets (a CUDA
// version would launch a selection kernel on the stream Communicator::enqueue hands its task); its registry
// entry refuses the runs it cannot serve before any work. Every rank's error goes into checkpoints, keyed by
// parameter name, so a --resume continues exactly. Its fraction is a flag of its own, --top-k-fraction, declared
// in its registry entry as a model declares its flags: --help shows it, its range is checked as it is parsed, and
// a --resume with another fraction is refused.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "framework/distributed/gradient/comm_hook.h"

namespace custom {

namespace dist = minidp::distributed;
using minidp::DType;
using minidp::Tensor;

class TopKHook : public dist::CommHook {
 public:
  /// Sends ceil(fraction x bucket size) entries per bucket and step.
  explicit TopKHook(double fraction) : fraction_(fraction) {}
  std::string name() const override { return "topk"; }
  /// For --bucket-mb auto: two all-gathers (ids and values, 4 bytes each) of k entries per rank. Each rank
  /// receives (world - 1) k entries, what an all-reduce of world / 2 x k entries moves.
  dist::WireCost wireCost(const std::vector<minidp::Shape>& shapes, DType, int world) const override {
    int64_t n = 0;
    for (const minidp::Shape& shape : shapes) n += minidp::shapeNumel(shape);
    return {2, 8.0 * static_cast<double>(entries(n)) * world / 2};
  }

  void setup(const std::vector<dist::GradBucket>& buckets, dist::Communicator& comm) override {
    const int world = comm.worldSize();
    // A re-plan (--rebuild-buckets, --bucket-mb auto) keeps each parameter's error feedback, by name.
    std::map<std::string, Tensor> kept;
    for (const State& old : state_) {
      for (const dist::BucketEntry& e : old.entries) {
        kept[e.name] = Tensor::alias(old.error, e.offset, {e.numel()}).clone();
      }
    }
    state_.clear();
    for (const dist::GradBucket& b : buckets) {
      MINIDP_CHECK(!b.buffer.isCuda() && b.buffer.dtype() == DType::F32,
                   "--comm-hook topk (examples/custom_hook) selects on the host: fp32 CPU buckets only");
      MINIDP_CHECK(b.reduction == dist::Reduction::AllReduce, "--comm-hook topk all-gathers: not with --zero 1");
      const int64_t n = b.buffer.numel();
      const int64_t k = entries(n);
      State s;
      s.entries = b.entries;
      s.error = Tensor::zeros({n}, DType::F32, minidp::Device::CPU);
      for (const dist::BucketEntry& e : b.entries) {
        if (auto it = kept.find(e.name); it != kept.end()) Tensor::alias(s.error, e.offset, {e.numel()}).copyFrom(it->second);
      }
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

  /// Every rank's error, gathered for rank 0 to write: "topk.error.<parameter>", (world, its size) in rank
  /// order. A collective: every rank calls it.
  dist::HookState checkpointState(dist::Communicator& comm) override {
    const int world = comm.worldSize();
    dist::HookState out;
    for (size_t b = 0; b < state_.size(); ++b) {
      const State& s = state_[b];
      const int64_t n = s.error.numel();
      Tensor all = Tensor::empty({world * n}, DType::F32, minidp::Device::CPU);
      comm.allGather(s.error, all, "gather topk error " + std::to_string(b))->wait();
      if (comm.rank() != 0) continue;  // rank 0 writes the checkpoint
      for (const dist::BucketEntry& e : s.entries) {
        Tensor error = Tensor::empty({world, e.numel()}, DType::F32, minidp::Device::CPU);
        for (int r = 0; r < world; ++r) {
          Tensor::alias(error, r * e.numel(), {e.numel()}).copyFrom(Tensor::alias(all, r * n + e.offset, {e.numel()}));
        }
        out.emplace_back(errorName(e.name), error);
      }
    }
    return out;
  }

  /// What checkpointState writes: every rank's error of each parameter, F32 (world, its size), finite.
  std::vector<minidp::nn::StateRule> stateSchema(int world, int64_t steps) const override {
    (void)steps;
    std::vector<minidp::nn::StateRule> rules;
    for (const State& s : state_) {
      for (const dist::BucketEntry& e : s.entries) rules.push_back({errorName(e.name), {DType::F32}, {world, e.numel()}});
    }
    return rules;
  }

  /// This rank's row of each saved error; a parameter the file holds none for keeps a zero error.
  void restoreState(const std::function<Tensor(const std::string&)>& find, dist::Communicator& comm) override {
    const int world = comm.worldSize(), rank = comm.rank();
    for (State& s : state_) {
      for (const dist::BucketEntry& e : s.entries) {
        const Tensor saved = find(errorName(e.name));
        if (!saved.defined()) continue;
        MINIDP_CHECK(saved.numel() == world * e.numel(), "topk error of '"
                                                             << e.name << "' was saved for "
                                                             << saved.numel() / std::max<int64_t>(e.numel(), 1)
                                                             << " ranks, this run has " << world);
        Tensor::alias(s.error, e.offset, {e.numel()})
            .copyFrom(Tensor::alias(saved.toDType(DType::F32), rank * e.numel(), {e.numel()}));
      }
    }
  }

 private:
  struct State {
    std::vector<dist::BucketEntry> entries;  // the bucket's parameters: where each one's error lives
    Tensor error, ids, values, allIds, allValues;
  };
  static std::string errorName(const std::string& param) { return "topk.error." + param; }
  /// The entries a bucket of n sends: ceil(fraction x n), at least 1.
  int64_t entries(int64_t n) const {
    return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(fraction_ * n)), 1, std::max<int64_t>(n, 1));
  }

  double fraction_;
  std::vector<State> state_;
};

/// The runs --comm-hook topk refuses, checked with the other flags (TopKHook::setup checks its buckets too,
/// for a program that builds DDP itself).
inline std::string topKUsageProblem(const dist::HookUsage& usage) {
  if (usage.device != minidp::Device::CPU) return "--comm-hook topk selects on the host: not with --device cuda";
  if (usage.gradDType != DType::F32) return "--comm-hook topk needs fp32 gradients: not with --dtype fp64";
  if (usage.zeroStage != 0) return "--comm-hook topk all-gathers: not with --zero 1";
  return {};
}

/// Makes --comm-hook topk and its flag --top-k-fraction available (call before the flags are parsed).
inline void registerTopKHook() {
  minidp::Flag fraction;
  fraction.name = "top-k-fraction";
  fraction.kind = minidp::FlagKind::Number;
  fraction.defaultValue = "0.05";
  fraction.help = "--comm-hook topk: the share of each bucket's entries sent per step";
  fraction.min = 0;
  fraction.max = 1;
  fraction.aboveMin = true;  // (0, 1]
  dist::registerCommHook({"topk", "the largest entries of each bucket, error feedback (examples/custom_hook)",
                          [](const dist::CommHookOptions& opts) {
                            return std::make_unique<TopKHook>(opts.flags.number("top-k-fraction"));
                          },
                          topKUsageProblem,
                          {fraction}});
}

}  // namespace custom
