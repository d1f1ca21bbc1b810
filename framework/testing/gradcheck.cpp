#include "framework/testing/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "framework/ops/ops.h"

namespace minidp::testing {

Tensor randomTensor(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(shapeNumel(shape));
  for (double& x : v) x = lo + (hi - lo) * ((rng() >> 11) * (1.0 / 9007199254740992.0));
  return Tensor::fromVector(v, shape).toDType(dtype);
}

Tensor randomIndices(const Shape& shape, int32_t bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(shapeNumel(shape));
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(bound));
  return Tensor::fromVector(v, shape);
}

namespace {
// sum(out * w) evaluated in float64 on the host.
double weightedSum(const Tensor& out, const std::vector<double>& w) {
  std::vector<double> v = out.toDType(DType::F64).toVector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}
}  // namespace

double gradcheck(const std::function<Variable(const std::vector<Variable>&)>& f, std::vector<Variable> inputs,
                 std::string* report, double h) {
  Variable out = f(inputs);
  Tensor wTensor = randomTensor(out.shape(), 99, 0.5, 1.5);
  std::vector<double> w = wTensor.toVector<double>();
  out.backward(wTensor.toDType(out.dtype()).to(out.device()));
  double worst = 0;
  std::ostringstream os;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requiresGrad()) continue;
    std::vector<double> analytic = inputs[i].grad().toVector<double>();
    Tensor& x = inputs[i].data();
    double* p = x.data<double>();
    double inputWorst = 0;
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = p[j];
      NoGradGuard noGrad;
      p[j] = saved + h;
      const double plus = weightedSum(f(inputs).data(), w);
      p[j] = saved - h;
      const double minus = weightedSum(f(inputs).data(), w);
      p[j] = saved;
      const double numeric = (plus - minus) / (2 * h);
      inputWorst = std::max(inputWorst, std::abs(numeric - analytic[j]) / std::max(1.0, std::abs(numeric)));
    }
    os << "input " << i << " " << shapeString(x.shape()) << ": max error " << inputWorst << "\n";
    worst = std::max(worst, inputWorst);
  }
  if (report) *report += os.str();
  return worst;
}

::testing::AssertionResult gradcheckPasses(const std::function<Variable(const std::vector<Variable>&)>& f,
                                           std::vector<Variable> inputs, double tolerance) {
  std::string report;
  const double error = gradcheck(f, std::move(inputs), &report);
  if (error < tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "gradcheck error " << error << " >= " << tolerance << "\n" << report;
}

double relativeError(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.toDType(DType::F64).toVector<double>();
  std::vector<double> y = b.toDType(DType::F64).toVector<double>();
  MINIDP_CHECK(x.size() == y.size(), "relativeError: " << x.size() << " vs " << y.size() << " elements");
  double maxDiff = 0, maxRef = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    maxDiff = std::max(maxDiff, std::abs(x[i] - y[i]));
    maxRef = std::max(maxRef, std::abs(y[i]));
  }
  return maxDiff / maxRef;
}

double relativeL2(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.toDType(DType::F64).toVector<double>();
  std::vector<double> y = b.toDType(DType::F64).toVector<double>();
  MINIDP_CHECK(x.size() == y.size(), "relativeL2: " << x.size() << " vs " << y.size() << " elements");
  double diff = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (x[i] - y[i]) * (x[i] - y[i]);
    ref += y[i] * y[i];
  }
  return std::sqrt(diff / std::max(ref, 1e-300));
}

}  // namespace minidp::testing
