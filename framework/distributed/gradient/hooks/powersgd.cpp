// PowerSGD (Vogels et al. 2019), as PyTorch's powerSGD_hook defines it (torch/distributed/algorithms/
// ddp_comm_hooks/powerSGD_hook.py; tests/reference/make_powersgd_fixtures.py states it step by step). Each
// gradient viewed as a matrix M (n = its first extent, m = the rest) of rank r' = min(n, m, r) is compressed
// when (n + m) r' x min_rate < n m; the others (all 1-D ones) travel uncompressed. For the first start_iter
// steps every bucket is averaged as it is. Then, per bucket and step, on the comm stream (thread):
//   1. error feedback: M = bucket + e (kept in e's buffer);
//   2. the uncompressed gradients packed into U; per matrix, Q orthogonalised, P = M Q;
//   3. U and every P all-reduced as one sum (U and P are contiguous);
//   4. P orthogonalised, Q = M^T P; every Q all-reduced (average), kept as next step's warm start;
//   5. P Q^T and U / world written into the bucket, and e = M - bucket (over the whole bucket).
// Every rank ends with the same bits: P, Q and U are reduced, and the decompression is the same everywhere.
// The local work is batched per bucket (kernels/low_rank.h): one orthogonalisation of all its factors, one
// packing of U, one pass of error feedback in, and each of the three products over all of its matrices (each
// reads M once; the last writes the bucket and e together).
// The state (e per rank, Q, the step) is the hook's and goes into checkpoints, keyed by parameter name.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "framework/distributed/gradient/comm_hook.h"
#include "framework/tensor/dispatch.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/low_rank.h"

namespace minidp::distributed {

namespace {

constexpr const char* kStep = "powersgd.step";
std::string qName(const std::string& param) { return "powersgd.q." + param; }
std::string errorName(const std::string& param) { return "powersgd.error." + param; }

/// One gradient of a bucket as PowerSGD treats it.
struct Matrix {
  BucketEntry entry;
  int64_t n = 0, m = 0, r = 0;  // (n, m) view, rank r'; r = 0: uncompressed
  int64_t p = 0, q = 0, u = 0;  // offsets into the bucket's P, Q (compressed) or U (uncompressed)
};

/// A bucket's plan and its buffers (allocated once per plan).
struct BucketState {
  std::vector<Matrix> matrices;
  Tensor up;        // U (the uncompressed gradients, packed), then every P: one all-reduce
  Tensor u, p, q;   // views: U and P in up; the packed Q factors
  Tensor scratch;   // the orthogonalisation's and the projections' (the largest of their batches' needs)
  Tensor error;     // e, the error feedback (zero until the first compressed step)
  std::vector<kernels::Factor> ps, qs;  // the P and Q factors, for the batched orthogonalisation
  std::vector<kernels::CopyRun> pack, unpack;  // bucket -> U, U -> bucket
  // The compressed matrices, for the batched products; their outputs point into the bucket's buffer at `grad`,
  // the one setup() was given.
  std::vector<kernels::LowRankMatrix> products;
  const void* grad = nullptr;
};

/// The warm-start matrices' seed, the same on every rank (PyTorch's PowerSGDState(random_seed=0)).
constexpr uint64_t kWarmStartSeed = 0;

/// N(0, 1) draws from a generator seeded by (seed, name): the same matrix on every rank.
std::vector<float> normalDraws(uint64_t seed, const std::string& name, int64_t count) {
  std::seed_seq sequence(name.begin(), name.end());
  std::vector<uint64_t> mixed(1);
  sequence.generate(mixed.begin(), mixed.end());
  std::mt19937_64 rng(seed ^ mixed[0]);
  std::vector<float> out(count);
  for (int64_t k = 0; k < count; ++k) {
    // Box-Muller from 53-bit uniforms: the same draws on every platform (std::normal_distribution is not).
    const double u1 = (static_cast<double>(rng() >> 11) + 1) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    out[k] = static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2));
  }
  return out;
}

class PowerSgdHook : public CommHook {
 public:
  /// Its flags' values (powerSgdFlags), checked against their ranges by makeCommHook.
  explicit PowerSgdHook(const FlagValues& flags)
      : rank_(flags.integer("powersgd-rank")),
        startIter_(flags.integer("powersgd-start-iter")),
        minCompression_(flags.number("powersgd-min-compression")) {}
  std::string name() const override { return "powersgd"; }

  /// Compressed: the U|P sum and the Q average, P = n r' and Q = m r' floats per compressed matrix, U the
  /// uncompressed gradients. (Its local work, on the comm stream too, is not link time and not modelled.)
  WireCost wireCost(const std::vector<Shape>& shapes, DType grad, int world) const override {
    (void)grad;  // fp32 (setup refuses others)
    (void)world;
    double up = 0, q = 0;
    for (const Shape& shape : shapes) {
      int64_t n = 0, m = 0, r = 0;
      viewAsMatrix(shape, n, m, r);
      up += static_cast<double>(r > 0 ? n * r : shapeNumel(shape));
      q += static_cast<double>(m * r);
    }
    return {q > 0 ? 2 : 1, 4 * (up + q)};
  }

  void setup(const std::vector<GradBucket>& buckets, Communicator&) override {
    // The state moves to the new plan by parameter name: e and Q keep their values across a re-plan.
    std::map<std::string, Tensor> errors, qs;
    for (const std::shared_ptr<BucketState>& held : buckets_) {
      const BucketState& b = *held;
      for (const Matrix& mx : b.matrices) {
        errors[mx.entry.name] = Tensor::alias(b.error, mx.entry.offset, mx.entry.shape).clone();
        if (mx.r > 0) qs[mx.entry.name] = Tensor::alias(b.q, mx.q, {mx.m, mx.r}).clone();
      }
    }
    buckets_.clear();
    for (const GradBucket& g : buckets) {
      MINIDP_CHECK(g.reduction == Reduction::AllReduce,
                   "--comm-hook powersgd all-reduces its factors: it cannot be combined with ZeRO (--zero 1 to 3)");
      MINIDP_CHECK(g.buffer.dtype() == DType::F32,
                   "--comm-hook powersgd needs fp32 gradients, bucket " << g.index << " holds "
                                                                        << dtypeName(g.buffer.dtype()));
      auto held = std::make_shared<BucketState>();
      BucketState& b = *held;
      int64_t p = 0, q = 0, u = 0;
      for (const BucketEntry& e : g.entries) {
        Matrix mx{e};
        viewAsMatrix(e.shape, mx.n, mx.m, mx.r);
        if (mx.r > 0) {
          mx.p = p;
          mx.q = q;
          p += mx.n * mx.r;
          q += mx.m * mx.r;
        } else {
          mx.u = u;
          u += e.numel();
        }
        b.matrices.push_back(mx);
      }
      const Device device = g.buffer.device();
      b.up = Tensor::empty({u + p}, DType::F32, device);
      b.u = Tensor::alias(b.up, 0, {u});
      b.p = Tensor::alias(b.up, u, {p});
      b.q = Tensor::zeros({q}, DType::F32, device);
      b.error = Tensor::zeros({g.buffer.numel()}, DType::F32, device);
      for (const Matrix& mx : b.matrices) {
        if (mx.r == 0) {
          b.pack.push_back({mx.entry.offset, mx.u, mx.entry.numel()});
          b.unpack.push_back({mx.u, mx.entry.offset, mx.entry.numel()});
          continue;
        }
        b.ps.push_back({b.p.data<float>() + mx.p, mx.n, mx.r});
        b.qs.push_back({b.q.data<float>() + mx.q, mx.m, mx.r});
        b.products.push_back({b.error.data<float>() + mx.entry.offset, b.p.data<float>() + mx.p,
                              b.q.data<float>() + mx.q, g.buffer.data<float>() + mx.entry.offset, mx.n, mx.m, mx.r});
      }
      b.grad = g.buffer.raw();
      // The stream runs one of them at a time: the scratch is the largest.
      const size_t scratchBytes =
          std::max({kernels::orthogonalizeScratchBytes(b.ps.data(), static_cast<int64_t>(b.ps.size())),
                    kernels::orthogonalizeScratchBytes(b.qs.data(), static_cast<int64_t>(b.qs.size())),
                    kernels::productScratchBytes(b.products.data(), static_cast<int64_t>(b.products.size()))});
      b.scratch = Tensor::empty({static_cast<int64_t>((scratchBytes + 7) / 8)}, DType::F64, device);
      for (Matrix& mx : b.matrices) {
        if (auto it = errors.find(mx.entry.name); it != errors.end()) {
          Tensor::alias(b.error, mx.entry.offset, mx.entry.shape).copyFrom(it->second);
        }
        if (mx.r == 0) continue;
        Tensor q = Tensor::alias(b.q, mx.q, {mx.m, mx.r});
        if (auto it = qs.find(mx.entry.name); it != qs.end() && it->second.shape() == q.shape()) {
          q.copyFrom(it->second);
        } else {
          q.copyFrom(Tensor::fromVector(normalDraws(kWarmStartSeed, mx.entry.name, mx.m * mx.r), q.shape()).to(device));
        }
      }
      buckets_.push_back(std::move(held));
    }
  }

  std::shared_ptr<Work> reduce(const GradBucket& bucket, Communicator& comm) override {
    const std::string tag = "bucket " + std::to_string(bucket.index);
    if (step_ < startIter_) return comm.allReduce(bucket.buffer, ReduceOp::Avg, tag);
    // The lambdas hold the plan (its buffers and factor lists), which a re-plan does not free under them.
    const std::shared_ptr<const BucketState> b = buckets_.at(bucket.index);
    const Tensor grad = bucket.buffer;
    MINIDP_CHECK(grad.raw() == b->grad,
                 "PowerSGD: " << tag << " comes in another buffer than the one setup() was given");
    const int world = comm.worldSize();
    std::vector<std::shared_ptr<Work>> works;
    // M = grad + e is kept in e's buffer: the products read it there, and the decompression writes the
    // bucket and takes what it wrote off e in the same pass.
    works.push_back(comm.enqueue(tag + " compress", grad, [=](cudaStream_t s) {
      MINIDP_LAUNCH_ON(s, grad, addInPlace<float>, b->error.data<float>(), grad.data<float>(), grad.numel());
      MINIDP_LAUNCH_ON(s, grad, copyRuns, b->error.data<float>(), b->u.data<float>(), b->pack.data(),
                       static_cast<int64_t>(b->pack.size()), 1.0f, nullptr);
      MINIDP_LAUNCH_ON(s, grad, orthogonalizeBatch, b->qs.data(), static_cast<int64_t>(b->qs.size()),
                       b->scratch.raw());
      MINIDP_LAUNCH_ON(s, grad, projectRowsBatch, b->products.data(), static_cast<int64_t>(b->products.size()),
                       b->scratch.raw());
    }));
    // PyTorch sums U and divides it afterwards (unpacking below), and sums P before orthogonalising it.
    if (b->up.numel() > 0) works.push_back(comm.allReduce(b->up, ReduceOp::Sum, tag + " U and P"));
    if (!b->ps.empty()) {
      works.push_back(comm.enqueue(tag + " Q", grad, [=](cudaStream_t s) {
        MINIDP_LAUNCH_ON(s, grad, orthogonalizeBatch, b->ps.data(), static_cast<int64_t>(b->ps.size()),
                         b->scratch.raw());
        MINIDP_LAUNCH_ON(s, grad, projectColumnsBatch, b->products.data(), static_cast<int64_t>(b->products.size()),
                         b->scratch.raw());
      }));
      works.push_back(comm.allReduce(b->q, ReduceOp::Avg, tag + " Q"));
    }
    works.push_back(comm.enqueue(tag + " decompress", grad, [=](cudaStream_t s) {
      MINIDP_LAUNCH_ON(s, grad, expandBatch, b->products.data(), static_cast<int64_t>(b->products.size()), true);
      MINIDP_LAUNCH_ON(s, grad, copyRuns, b->u.data<float>(), grad.data<float>(), b->unpack.data(),
                       static_cast<int64_t>(b->unpack.size()), static_cast<float>(world), b->error.data<float>());
    }));
    return std::make_shared<WorkChain>(tag, grad.nbytes(), std::move(works));
  }

  void endStep() override { ++step_; }

  HookState checkpointState(Communicator& comm) override {
    const int world = comm.worldSize();
    HookState out;
    out.emplace_back(kStep, Tensor::fromVector(std::vector<double>{static_cast<double>(step_)}, {1}));
    for (size_t k = 0; k < buckets_.size(); ++k) {
      const BucketState& b = *buckets_[k];
      // Every rank's error feedback, for rank 0 to write: (world, bucket) in rank order.
      Tensor errors = Tensor::empty({world * b.error.numel()}, DType::F32, b.error.device());
      comm.allGather(b.error, errors, "gather powersgd error " + std::to_string(k))->wait();
      if (comm.rank() != 0) continue;  // rank 0 writes the checkpoint
      const Tensor host = errors.to(Device::CPU);
      for (const Matrix& mx : b.matrices) {
        Tensor e = Tensor::empty({world, mx.entry.numel()}, DType::F32, Device::CPU);
        for (int r = 0; r < world; ++r) {
          Tensor::alias(e, r * mx.entry.numel(), {mx.entry.numel()})
              .copyFrom(Tensor::alias(host, r * b.error.numel() + mx.entry.offset, {mx.entry.numel()}));
        }
        out.emplace_back(errorName(mx.entry.name), e);
        if (mx.r > 0) out.emplace_back(qName(mx.entry.name), Tensor::alias(b.q, mx.q, {mx.m, mx.r}).to(Device::CPU));
      }
    }
    if (comm.rank() != 0) out.clear();
    return out;
  }

  /// The step (F64 [1], an integer no larger than the steps taken), and per parameter every rank's error
  /// feedback (F32 [world, its size]) and, when compressed, Q (F32 [m, r']), all finite.
  std::vector<nn::StateRule> stateSchema(int world, int64_t steps) const override {
    std::vector<nn::StateRule> rules = {{kStep, {DType::F64}, {1}, true, true, 0, static_cast<double>(steps)}};
    for (const std::shared_ptr<BucketState>& held : buckets_) {
      for (const Matrix& mx : held->matrices) {
        rules.push_back({errorName(mx.entry.name), {DType::F32}, {world, mx.entry.numel()}});
        if (mx.r > 0) rules.push_back({qName(mx.entry.name), {DType::F32}, {mx.m, mx.r}});
      }
    }
    return rules;
  }

  void restoreState(const std::function<Tensor(const std::string&)>& find, Communicator& comm) override {
    const Tensor step = find(kStep);
    if (step.defined()) step_ = static_cast<int64_t>(step.toDType(DType::F64).toVector<double>()[0]);
    const int world = comm.worldSize(), rank = comm.rank();
    for (const std::shared_ptr<BucketState>& held : buckets_) {
      BucketState& b = *held;
      for (const Matrix& mx : b.matrices) {
        const Tensor e = find(errorName(mx.entry.name));
        if (e.defined()) {
          MINIDP_CHECK(e.numel() == world * mx.entry.numel(),
                       "PowerSGD error feedback of '" << mx.entry.name << "' was saved for "
                                                      << e.numel() / std::max<int64_t>(mx.entry.numel(), 1)
                                                      << " ranks, this run has " << world);
          Tensor::alias(b.error, mx.entry.offset, {mx.entry.numel()})
              .copyFrom(Tensor::alias(e.toDType(DType::F32), rank * mx.entry.numel(), {mx.entry.numel()})
                            .to(b.error.device()));
        }
        if (mx.r == 0) continue;
        const Tensor q = find(qName(mx.entry.name));
        if (!q.defined()) continue;
        MINIDP_CHECK(q.numel() == mx.m * mx.r, "PowerSGD Q of '" << mx.entry.name << "' holds " << q.numel()
                                                                 << " values, expected " << mx.m * mx.r
                                                                 << " (another --powersgd-rank?)");
        Tensor::alias(b.q, mx.q, {mx.m * mx.r}).copyFrom(q.toDType(DType::F32).view({mx.m * mx.r}).to(b.q.device()));
      }
    }
  }

 private:
  /// A gradient of `shape` as PowerSGD sees it: n = its first extent, m = the rest, compressed at rank r =
  /// min(n, m, --powersgd-rank) when (n + m) r x the minimum rate < n m, else r = 0 (sent as it is).
  void viewAsMatrix(const Shape& shape, int64_t& n, int64_t& m, int64_t& r) const {
    n = shape.empty() ? 1 : shape[0];
    m = n == 0 ? 0 : shapeNumel(shape) / n;
    r = std::min<int64_t>({n, m, rank_});
    const bool compress =
        static_cast<double>((n + m) * r) * minCompression_ < static_cast<double>(n * m);
    if (!compress) r = 0;
  }

  // The rank of the approximation, the dense steps before compression starts (PyTorch's start_powerSGD_iter),
  // and the compression a matrix must reach to be compressed (min_compression_rate).
  int64_t rank_, startIter_;
  double minCompression_;
  int64_t step_ = 0;
  std::vector<std::shared_ptr<BucketState>> buckets_;  // shared with the work in flight
};

}  // namespace

/// The runs PowerSGD refuses (its CommHookEntry::usageProblem), one line each.
std::string powerSgdUsageProblem(const HookUsage& usage) {
  if (usage.zeroStage != 0) {
    return "--comm-hook powersgd with --zero " + std::to_string(usage.zeroStage) +
           " is not supported (its factors are all-reduced, not sharded)";
  }
  if (usage.cudaGraph) {
    return "--comm-hook powersgd with --cuda-graph is not supported (its step counter chooses the collectives on the "
           "host)";
  }
  if (usage.gradDType == DType::F64) return "--comm-hook powersgd needs fp32 gradients: not with --dtype fp64";
  return {};
}

std::unique_ptr<CommHook> makePowerSgdHook(const CommHookOptions& opts) {
  return std::make_unique<PowerSgdHook>(opts.flags);
}

/// PowerSGD's flags (its CommHookEntry::flags).
std::vector<Flag> powerSgdFlags() {
  return {{"powersgd-rank", FlagKind::Integer, "4", "--comm-hook powersgd: rank of the approximation", 1, 1024},
          {"powersgd-start-iter", FlagKind::Integer, "10",
           "--comm-hook powersgd: steps averaged uncompressed before compression starts", 0, 1e9},
          {"powersgd-min-compression", FlagKind::Number, "2",
           "--comm-hook powersgd: a matrix is compressed only when its factors are this many times smaller", 0, 1e9}};
}

}  // namespace minidp::distributed
