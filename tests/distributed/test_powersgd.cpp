// The PowerSGD comm hook (hooks/powersgd.cpp): against PyTorch 1.13's powerSGD_hook on 2 ranks (fixtures
// from tests/reference/make_powersgd_fixtures.py: the same initial weights, batches and initial Q matrices,
// 5 SGD steps, rank 2, start_iter 2); on any rank count identical on every rank, overlap on == off to the
// byte, and a restored hook state continuing exactly; the Gram-Schmidt kernel against float64; the batched
// products against the CPU's GEMM.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <tuple>

#include "framework/distributed/gradient/ddp.h"
#include "framework/nn/checkpoint.h"
#include "framework/ops/ops.h"
#include "framework/optim/grad_clip.h"
#include "framework/optim/optimizer.h"
#include "framework/runtime/device.h"
#include "framework/testing/gradcheck.h"
#include "kernels/low_rank.h"
#include "kernels/matmul.h"
#include "models/gpt.h"
#include "models/mlp.h"
#include "tests/distributed/dist_test_env.h"
#include "tests/support/cuda_skip.h"
#include "tests/support/parameters.h"
#include "tests/support/reference_models.h"

namespace minidp {
namespace {

using distributed::DdpOptions;
using distributed::DistributedDataParallel;
using distributed::Overlap;

/// Rows [rank * B, (rank + 1) * B) of step `step` of a fixture's (steps, world * B, ...) tensor.
Tensor rowsOf(const Tensor& all, int64_t step, int rank, int64_t B, Device device) {
  Shape shape(all.shape().begin() + 1, all.shape().end());
  const int64_t perRow = shapeNumel(shape) / shape[0];
  shape[0] = B;
  const int64_t offset = step * all.numel() / all.shape()[0] + rank * B * perRow;
  return Tensor::alias(all, offset, shape).clone().to(device);
}

class PowerSgd : public testing::CommunicatorTest {};

TEST_P(PowerSgd, MatchesPyTorchsPowerSgdHook) {
  for (const std::string fixture : {"powersgd_mlp.safetensors", "powersgd_gpt.safetensors"}) {
    SCOPED_TRACE(fixture);
    const SafeTensorFile f = readSafetensors(testing::fixturePath(fixture));
    const auto& meta = f.metadata;
    if (world_ != std::stoi(meta.at("world"))) GTEST_SKIP() << "the fixture was made on " << meta.at("world") << " ranks";
    auto model = testing::buildReferenceModel(f);
    nn::loadParameters(*model, f, "param.");
    model->to(GetParam(), DType::F32);
    DdpOptions opts;
    opts.bucketCapBytes = opts.firstBucketCapBytes = size_t(256) << 20;  // one bucket, as the fixture's DDP
    opts.commHook.name = "powersgd";
    opts.commHook.flags.set("powersgd-rank", meta.at("rank"));
    opts.commHook.flags.set("powersgd-start-iter", meta.at("start_iter"));
    opts.commHook.flags.set("powersgd-min-compression", meta.at("min_compression_rate"));
    DistributedDataParallel ddp(model->namedParameters(), comm_, opts);
    // The fixture's initial Q matrices, in place of the hook's own draws.
    ddp.restoreHookState([&f](const std::string& name) {
      const std::string prefix = "powersgd.q.";
      if (name.compare(0, prefix.size(), prefix) != 0) return Tensor();
      return nn::fromSafeTensor(f.at("q." + name.substr(prefix.size())), name);
    });
    optim::Sgd sgd(model->namedParameters(), std::stod(meta.at("lr")));  // no momentum, as the fixture's
    const Tensor inputs = nn::fromSafeTensor(f.at("inputs"), "inputs");
    const Tensor targets = nn::fromSafeTensor(f.at("targets"), "targets");
    const int64_t B = std::stoll(meta.at("B"));
    for (int64_t step = 0; step < std::stoll(meta.at("steps")); ++step) {
      ddp.prepareStep();
      model->loss(rowsOf(inputs, step, rank_, B, GetParam()), rowsOf(targets, step, rank_, B, GetParam())).backward();
      ddp.finalize();
      sgd.step();
    }
    // Within 1e-5 of each tensor's largest magnitude; the compressed steps change the weights by ~1e-2.
    double worst = 0;
    for (const auto& [name, p] : model->namedParameters()) {
      const std::vector<double> got = p.data().toDType(DType::F64).toVector<double>();
      const std::vector<double> want = nn::fromSafeTensor(f.at("final." + name), name).toDType(DType::F64).toVector<double>();
      ASSERT_EQ(got.size(), want.size()) << name;
      double scale = 0, error = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        scale = std::max(scale, std::abs(want[i]));
        error = std::max(error, std::abs(got[i] - want[i]));
      }
      EXPECT_LE(error, 1e-5 * scale) << name << ": max error " << error << " of " << scale;
      worst = std::max(worst, error / scale);
    }
    if (rank_ == 0) std::printf("%s: largest error %.2e of a tensor's largest magnitude\n", fixture.c_str(), worst);
  }
}

/// Training runs of a tiny GPT with PowerSGD over several buckets.
struct Setting {
  Overlap overlap = Overlap::DuringBackward;
  int64_t accum = 2;
  double clip = 0.5;
};

class PowerSgdRuns : public testing::CommunicatorTest {
 protected:
  void SetUp() override {
    testing::CommunicatorTest::SetUp();
    device_ = GetParam();
  }
  Device device_ = Device::CPU;  // where train() runs, on comm_
  static constexpr int64_t kRows = 2, kContext = 6;

  DdpOptions options(Overlap overlap) const {
    DdpOptions opts{overlap, 1200, 300};  // caps in bytes: several buckets
    opts.commHook.name = "powersgd";
    opts.commHook.flags.set("powersgd-rank", 2);
    opts.commHook.flags.set("powersgd-start-iter", 2);
    opts.commHook.flags.set("powersgd-min-compression", 1);
    return opts;
  }

  std::unique_ptr<models::GPT> model() const {
    auto m = std::make_unique<models::GPT>(models::GptConfig{32, kContext, 2, 2, 16}, 11 + rank_);
    m->to(device_, DType::F32);
    return m;
  }

  /// Steps [first, last) of `run` on `m` under `ddp` (AdamW, clipping, gradient accumulation).
  void steps(models::GPT& m, DistributedDataParallel& ddp, optim::Optimizer& adamw, optim::GradClipper& clipper,
             const Setting& run, int64_t first, int64_t last) const {
    for (int64_t step = first; step < last; ++step) {
      ddp.prepareStep();
      for (int64_t micro = 0; micro < run.accum; ++micro) {
        const uint64_t seed = 500 + 2 * (step * run.accum + micro);
        const auto mine = [&](const Tensor& t) {
          return Tensor::alias(t, rank_ * kRows * kContext, {kRows, kContext}).clone().to(device_);
        };
        const Tensor inputs = testing::randomIndices({world_ * kRows, kContext}, 32, seed);
        const Tensor targets = testing::randomIndices({world_ * kRows, kContext}, 32, seed + 1);
        ddp.setRequireSync(micro + 1 == run.accum);
        Variable loss = m.loss(mine(inputs), mine(targets));
        ops::scale(loss, 1.0 / static_cast<double>(run.accum)).backward();
      }
      ddp.finalize();
      ddp.computeGradNorm(clipper);
      adamw.step();
    }
  }

  /// `total` steps; with `split` > 0, the first `split` steps, then a new DDP (a fresh hook: new Q draws,
  /// zero error feedback, step 0) over the same model and optimizer, its hook state restored from what the
  /// old one saved (rank 0's checkpoint tensors, broadcast as a file read by every rank would give them),
  /// and the rest.
  std::unique_ptr<models::GPT> train(const Setting& run, int64_t total, int64_t split = 0) const {
    auto m = model();
    auto ddp = std::make_unique<DistributedDataParallel>(m->namedParameters(), comm_, options(run.overlap));
    auto adamw = optim::makeOptimizer("adamw", m->namedParameters(), 1e-2, 0.01);
    optim::GradClipper clipper(run.clip, DType::F32, device_);
    adamw->setGradScale(clipper.scale());
    steps(*m, *ddp, *adamw, clipper, run, 0, split > 0 ? split : total);
    if (split == 0) return m;
    std::map<std::string, Tensor> saved;
    for (const auto& [name, t] : ddp->hookState()) saved[name] = t.to(Device::CPU);
    EXPECT_EQ(saved.empty(), rank_ != 0) << "rank 0 (alone) writes the hook's state";
    ddp.reset();
    ddp = std::make_unique<DistributedDataParallel>(m->namedParameters(), comm_, options(run.overlap));
    ddp->restoreHookState([&](const std::string& name) {
      const std::vector<std::string> numel =
          comm_->allGather(saved.count(name) ? std::to_string(saved.at(name).numel()) : "");
      if (numel[0].empty()) return Tensor();
      // float64 on the wire: every saved dtype (F32 values, the F64 step) passes through it exactly.
      Tensor flat = saved.count(name) ? Tensor::alias(saved.at(name), 0, {saved.at(name).numel()}).toDType(DType::F64)
                                      : Tensor::zeros({std::stoll(numel[0])}, DType::F64, Device::CPU);
      flat = flat.to(device_);
      comm_->broadcast(flat, 0);
      return flat.to(Device::CPU);
    });
    steps(*m, *ddp, *adamw, clipper, run, split, total);
    return m;
  }
};

TEST_P(PowerSgdRuns, IdenticalOnEveryRankAndOverlapOnEqualsOff) {
  const std::string on = testing::parameterBytes(*train(Setting{Overlap::DuringBackward}, 8));
  const std::string off = testing::parameterBytes(*train(Setting{Overlap::AfterBackward}, 8));
  EXPECT_TRUE(on == off) << "overlap on and off differ";
  const std::vector<std::string> all = comm_->allGather(on);
  for (int r = 1; r < world_; ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r << " differs from rank 0";
}

TEST_P(PowerSgdRuns, RestoredHookStateContinuesExactly) {
  const std::string straight = testing::parameterBytes(*train(Setting{}, 8));
  const std::string resumed = testing::parameterBytes(*train(Setting{}, 8, 5));
  EXPECT_TRUE(straight == resumed) << "5 steps + restore + 3 steps differ from 8 steps";
}

TEST_P(PowerSgdRuns, CudaMatchesTheCpu) {
  if (GetParam() != Device::CUDA) GTEST_SKIP() << "compares a CUDA run with the same run on the CPU";
  const auto gpu = train(Setting{}, 8);
  std::string reason;
  const std::shared_ptr<distributed::Communicator> cuda = comm_;
  comm_ = testing::sharedCommunicator(Device::CPU, &reason);
  ASSERT_TRUE(comm_) << reason;
  device_ = Device::CPU;
  const auto cpu = train(Setting{}, 8);
  comm_ = cuda;
  // fp32 GEMMs and reductions in other orders, through 8 AdamW steps of lr 1e-2, whose normalised steps
  // turn a difference in a near-zero gradient element into one of lr (2e-4 seen on the H200 in the biases);
  // a wrong compression moves every tensor by about 1e-1.
  testing::expectParametersNear(*gpu, *cpu, testing::ParameterField::Data, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Devices, PowerSgd, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const auto& info) { return std::string(deviceName(info.param)); });
INSTANTIATE_TEST_SUITE_P(Devices, PowerSgdRuns, ::testing::Values(Device::CPU, Device::CUDA),
                         [](const auto& info) { return std::string(deviceName(info.param)); });

/// Modified Gram-Schmidt in float64, as PyTorch's _orthogonalize_gram_schmidt.
std::vector<double> gramSchmidt(std::vector<double> m, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) {
    double norm = 0;
    for (int64_t r = 0; r < rows; ++r) norm += m[r * cols + i] * m[r * cols + i];
    norm = std::sqrt(norm);
    for (int64_t r = 0; r < rows; ++r) m[r * cols + i] /= norm;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0;
      for (int64_t r = 0; r < rows; ++r) dot += m[r * cols + i] * m[r * cols + j];
      for (int64_t r = 0; r < rows; ++r) m[r * cols + j] -= dot * m[r * cols + i];
    }
  }
  return m;
}

/// Largest |got - want| over the largest |want|.
double relativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double error = 0, scale = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    error = std::max(error, std::abs(got[k] - want[k]));
    scale = std::max(scale, std::abs(want[k]));
  }
  return error / scale;
}

/// Orthogonalises each matrix of `inputs` (row-major (rows, cols) each) as ONE batch: on the CPU, then (when a
/// GPU is there) on CUDA. Returns the results per device, each a list in the order of `inputs`.
std::vector<std::vector<std::vector<float>>> orthogonalizeAsOneBatch(
    const std::vector<std::vector<float>>& inputs, const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  std::vector<std::vector<std::vector<float>>> results(1, inputs);
  std::vector<kernels::Factor> factors;
  for (size_t k = 0; k < inputs.size(); ++k) factors.push_back({results[0][k].data(), shapes[k].first, shapes[k].second});
  kernels::cpu::orthogonalizeBatch(factors.data(), static_cast<int64_t>(factors.size()), nullptr);
#if MINIDP_WITH_CUDA
  if (runtime::cudaAvailable()) {
    std::vector<Tensor> device;
    for (size_t k = 0; k < inputs.size(); ++k) {
      device.push_back(Tensor::fromVector(inputs[k], {shapes[k].first, shapes[k].second}).to(Device::CUDA));
      factors[k].m = device.back().data<float>();
    }
    const size_t bytes = kernels::orthogonalizeScratchBytes(factors.data(), static_cast<int64_t>(factors.size()));
    const Tensor scratch = Tensor::empty({static_cast<int64_t>(bytes / 8 + 1)}, DType::F64, Device::CUDA);
    kernels::cuda::orthogonalizeBatch(factors.data(), static_cast<int64_t>(factors.size()), scratch.raw(),
                                      runtime::computeStream());
    results.emplace_back();
    for (const Tensor& t : device) results.back().push_back(t.toVector<float>());
  }
#endif
  return results;
}

// Both CUDA paths in one batch: the Cholesky QR (up to 32 columns, here up to 20000 x 4, spread over ten
// blocks, and 9000 x 32) and one block's Gram-Schmidt (more columns: 100 x 40), each factor against float64
// Gram-Schmidt. 70 factors: more than one launch of the batch (64 factors each).
TEST(LowRank, OrthogonalizeBatchMatchesFloat64GramSchmidtOnCpuAndCuda) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{7, 1}, {50, 4}, {3000, 3}, {20000, 4}, {9000, 32}, {100, 40}};
  for (int64_t k = 0; shapes.size() < 70; ++k) shapes.push_back({30 + 97 * k, 1 + k % 16});
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<double>> want;
  for (const auto& [rows, cols] : shapes) {
    inputs.push_back(testing::randomTensor({rows, cols}, 77 + rows, -1, 1, DType::F32).toVector<float>());
    want.push_back(gramSchmidt(std::vector<double>(inputs.back().begin(), inputs.back().end()), rows, cols));
  }
  const auto results = orthogonalizeAsOneBatch(inputs, shapes);
  for (size_t d = 0; d < results.size(); ++d) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      EXPECT_LE(relativeError(results[d][k], want[k]), 1e-5)
          << (d == 0 ? "cpu " : "cuda ") << shapes[k].first << "x" << shapes[k].second;
    }
  }
}

// A factor of lower rank than its columns (a small batch's gradient): a zero column and a copy of an earlier
// one come out zero, the others orthonormal, nothing NaN, on both devices and both CUDA paths.
TEST(LowRank, DependentColumnsComeOutZero) {
  const int64_t rows = 200;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  std::vector<std::vector<float>> inputs;
  for (const int64_t cols : {4, 36}) {
    std::vector<float> x = testing::randomTensor({rows, cols}, 5 + cols, -1, 1, DType::F32).toVector<float>();
    for (int64_t r = 0; r < rows; ++r) {
      x[r * cols + 1] = 0;                   // zero
      x[r * cols + 3] = 2 * x[r * cols + 0];  // a multiple of column 0
    }
    shapes.push_back({rows, cols});
    inputs.push_back(x);
  }
  for (const auto& device : orthogonalizeAsOneBatch(inputs, shapes)) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      const std::vector<float>& m = device[k];
      const int64_t cols = shapes[k].second;
      for (int64_t i = 0; i < cols; ++i) {
        for (int64_t j = i; j < cols; ++j) {
          double dot = 0;
          for (int64_t r = 0; r < rows; ++r) dot += static_cast<double>(m[r * cols + i]) * m[r * cols + j];
          const bool zero = i == 1 || i == 3 || j == 1 || j == 3;
          const double want = zero ? 0.0 : (i == j ? 1.0 : 0.0);
          ASSERT_NEAR(dot, want, 1e-5) << cols << " columns, (" << i << ", " << j << ")";
        }
      }
    }
  }
}

/// A matrix of the products' tests: M (n, m), P (n, r), Q (m, r), values in [-1, 1].
struct ProductCase {
  int64_t n, m, r;
  std::vector<float> M, P, Q;
};

/// Shapes that are multiples of nothing, at ranks of every tile width (up to 32 our CUDA kernels, 40 cuBLAS),
/// with one and several splits, then small ones up to 70 matrices (two launches of 64 on CUDA), the last a
/// larger one again so that the second launch splits too.
std::vector<ProductCase> productCases() {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 5, 1}, {37, 300, 2}, {300, 37, 3}, {1000, 769, 8}, {5000, 333, 13}, {77, 3001, 32}, {90, 70, 40}};
  for (int64_t k = 0; shapes.size() < 69; ++k) shapes.push_back({1 + (k * 37) % 211, 1 + (k * 53) % 389, 1 + k % 33});
  shapes.push_back({2000, 513, 4});
  std::vector<ProductCase> cases;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto [n, m, r] = shapes[k];
    const uint64_t seed = 3 * k;
    cases.push_back({n, m, r, testing::randomTensor({n, m}, seed + 1, -1, 1, DType::F32).toVector<float>(),
                     testing::randomTensor({n, r}, seed + 2, -1, 1, DType::F32).toVector<float>(),
                     testing::randomTensor({m, r}, seed + 3, -1, 1, DType::F32).toVector<float>()});
  }
  return cases;
}

/// The batched products of `cases`, each matrix from the case's inputs, as one batch each on `device`: P = M Q,
/// Q = M^T P, then P Q^T with M -= it. Per matrix: {P, Q, P Q^T, M after}.
std::vector<std::array<std::vector<float>, 4>> batchedProducts(const std::vector<ProductCase>& cases, Device device) {
  std::vector<Tensor> M, P, Q, gotP, gotQ, out;
  std::vector<kernels::LowRankMatrix> rows, columns, expand;
  for (const ProductCase& c : cases) {
    M.push_back(Tensor::fromVector(c.M, {c.n, c.m}).to(device));
    P.push_back(Tensor::fromVector(c.P, {c.n, c.r}).to(device));
    Q.push_back(Tensor::fromVector(c.Q, {c.m, c.r}).to(device));
    gotP.push_back(Tensor::zeros({c.n, c.r}, DType::F32, device));
    gotQ.push_back(Tensor::zeros({c.m, c.r}, DType::F32, device));
    out.push_back(Tensor::zeros({c.n, c.m}, DType::F32, device));
    rows.push_back({M.back().data<float>(), gotP.back().data<float>(), Q.back().data<float>(), nullptr, c.n, c.m, c.r});
    columns.push_back(
        {M.back().data<float>(), P.back().data<float>(), gotQ.back().data<float>(), nullptr, c.n, c.m, c.r});
    expand.push_back({M.back().data<float>(), P.back().data<float>(), Q.back().data<float>(), out.back().data<float>(),
                      c.n, c.m, c.r});
  }
  const int64_t count = static_cast<int64_t>(cases.size());
  const size_t bytes = kernels::productScratchBytes(rows.data(), count);
  const Tensor scratch = Tensor::empty({static_cast<int64_t>(bytes / 4 + 1)}, DType::F32, device);
  if (device == Device::CPU) {
    kernels::cpu::projectRowsBatch(rows.data(), count, scratch.raw());
    kernels::cpu::projectColumnsBatch(columns.data(), count, scratch.raw());
    kernels::cpu::expandBatch(expand.data(), count, true);
  } else {
#if MINIDP_WITH_CUDA
    const cudaStream_t s = runtime::computeStream();
    kernels::cuda::projectRowsBatch(rows.data(), count, scratch.raw(), s);
    kernels::cuda::projectColumnsBatch(columns.data(), count, scratch.raw(), s);
    kernels::cuda::expandBatch(expand.data(), count, true, s);
#endif
  }
  std::vector<std::array<std::vector<float>, 4>> results;
  for (size_t k = 0; k < cases.size(); ++k) {
    results.push_back(
        {gotP[k].toVector<float>(), gotQ[k].toVector<float>(), out[k].toVector<float>(), M[k].toVector<float>()});
  }
  return results;
}

// The batched CPU products are the CPU GEMM per matrix, bit for bit (and M -= P Q^T one subtraction per
// element); the scratch they would take on CUDA stays within 1 / kPartialShare of the matrices' elements.
TEST(LowRank, BatchedCpuProductsAreGemmPerMatrix) {
  const std::vector<ProductCase> cases = productCases();
  const auto got = batchedProducts(cases, Device::CPU);
  int64_t elements = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const ProductCase& c = cases[k];
    SCOPED_TRACE(std::to_string(c.n) + "x" + std::to_string(c.m) + " rank " + std::to_string(c.r));
    std::vector<float> p(c.n * c.r), q(c.m * c.r), out(c.n * c.m), error = c.M;
    kernels::cpu::gemm<float>(false, false, c.n, c.r, c.m, 1.0f, c.M.data(), 0, c.Q.data(), 0, 0.0f, p.data(), 0, 1);
    kernels::cpu::gemm<float>(true, false, c.m, c.r, c.n, 1.0f, c.M.data(), 0, c.P.data(), 0, 0.0f, q.data(), 0, 1);
    kernels::cpu::gemm<float>(false, true, c.n, c.m, c.r, 1.0f, c.P.data(), 0, c.Q.data(), 0, 0.0f, out.data(), 0, 1);
    for (size_t e = 0; e < error.size(); ++e) error[e] -= out[e];
    EXPECT_EQ(got[k][0], p);
    EXPECT_EQ(got[k][1], q);
    EXPECT_EQ(got[k][2], out);
    EXPECT_EQ(got[k][3], error);
    elements += c.n * c.m;
  }
  std::vector<kernels::LowRankMatrix> mats;
  for (const ProductCase& c : cases) mats.push_back({nullptr, nullptr, nullptr, nullptr, c.n, c.m, c.r});
  EXPECT_LE(kernels::productScratchBytes(mats.data(), static_cast<int64_t>(mats.size())),
            static_cast<size_t>(elements / kernels::kPartialShare) * sizeof(float));
}

// The three batched products, CUDA (our kernels up to rank 32, cuBLAS above) against the CPU's GEMM, all the
// shapes of productCases as ONE batch (two launches of each product on CUDA).
TEST(LowRank, ProductsMatchTheCpu) {
#if MINIDP_WITH_CUDA
  MINIDP_SKIP_WITHOUT_CUDA();
  const std::vector<ProductCase> cases = productCases();
  const auto want = batchedProducts(cases, Device::CPU), got = batchedProducts(cases, Device::CUDA);
  // fp32 sums of m, n and r products of numbers in [-1, 1]: within 1e-5 of the sum's size bound.
  const auto near = [](const std::vector<float>& got, const std::vector<float>& want, double bound) {
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::abs(double(got[k]) - want[k]));
    EXPECT_LE(worst, 1e-5 * bound);
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const ProductCase& c = cases[k];
    SCOPED_TRACE(std::to_string(k) + ": " + std::to_string(c.n) + "x" + std::to_string(c.m) + " rank " +
                 std::to_string(c.r));
    near(got[k][0], want[k][0], double(c.m));
    near(got[k][1], want[k][1], double(c.n));
    near(got[k][2], want[k][2], double(c.r));
    near(got[k][3], want[k][3], double(c.r + 1));
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// The packing and unpacking of the uncompressed gradients (with the error feedback), CUDA against the CPU
// twin bit for bit (one rounding each: a quotient, a difference). 70 runs: more than one launch.
TEST(LowRank, CopyRunsAndErrorFeedbackMatchTheCpu) {
  const Tensor src = testing::randomTensor({5000}, 3, -2, 2, DType::F32);
  std::vector<kernels::CopyRun> runs;
  int64_t to = 0;
  for (int64_t k = 0; k < 70; ++k) {
    const int64_t count = (k * 37) % 61;
    runs.push_back({k * 70, to, count});
    to += count;
  }
  std::vector<float> cpuOut(to, -1.0f);
  const std::vector<float> x = src.toVector<float>();
  kernels::cpu::copyRuns(x.data(), cpuOut.data(), runs.data(), static_cast<int64_t>(runs.size()), 3.0f, nullptr);
  for (const kernels::CopyRun& run : runs) {
    for (int64_t e = 0; e < run.count; ++e) ASSERT_EQ(cpuOut[run.to + e], x[run.from + e] / 3.0f);
  }
  // With error feedback: error[to + k] -= the value written.
  std::vector<float> cpuOut2(to, -1.0f), cpuError(to);
  for (int64_t k = 0; k < to; ++k) cpuError[k] = x[(k * 7) % 5000];
  const std::vector<float> error0 = cpuError;
  kernels::cpu::copyRuns(x.data(), cpuOut2.data(), runs.data(), static_cast<int64_t>(runs.size()), 3.0f,
                         cpuError.data());
  for (int64_t k = 0; k < to; ++k) ASSERT_EQ(cpuError[k], error0[k] - cpuOut2[k]);
#if MINIDP_WITH_CUDA
  if (!runtime::cudaAvailable()) return;  // the CPU twin checked above
  Tensor dsrc = src.to(Device::CUDA), dout = Tensor::fromVector(std::vector<float>(to, -1.0f), {to}).to(Device::CUDA);
  kernels::cuda::copyRuns(dsrc.data<float>(), dout.data<float>(), runs.data(), static_cast<int64_t>(runs.size()),
                          3.0f, nullptr, runtime::computeStream());
  EXPECT_EQ(dout.toVector<float>(), cpuOut);
  Tensor derror = Tensor::fromVector(error0, {to}).to(Device::CUDA);
  kernels::cuda::copyRuns(dsrc.data<float>(), dout.data<float>(), runs.data(), static_cast<int64_t>(runs.size()),
                          3.0f, derror.data<float>(), runtime::computeStream());
  EXPECT_EQ(derror.toVector<float>(), cpuError);
#endif
}

}  // namespace
}  // namespace minidp
