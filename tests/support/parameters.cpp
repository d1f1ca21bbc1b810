#include "tests/support/parameters.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "framework/testing/gradcheck.h"

namespace minidp::testing {

namespace {

const Tensor& fieldOf(const Variable& p, ParameterField field) {
  return field == ParameterField::Data ? p.data() : p.grad();
}

std::string hostBytes(const Tensor& t) {
  const Tensor host = t.to(Device::CPU);
  return std::string(static_cast<const char*>(host.raw()), host.nbytes());
}

}  // namespace

void expectSameParameters(const nn::Module& a, const nn::Module& b) {
  const nn::NamedParameters pa = a.namedParameters(), pb = b.namedParameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(pa[i].second.shape(), pb[i].second.shape()) << pa[i].first;
    EXPECT_EQ(pa[i].second.dtype(), pb[i].second.dtype()) << pa[i].first;
    EXPECT_TRUE(hostBytes(pa[i].second.data()) == hostBytes(pb[i].second.data())) << pa[i].first << " differs";
  }
}

void expectParametersNear(const nn::Module& got, const nn::Module& want, ParameterField field, double tolerance) {
  const nn::NamedParameters pg = got.namedParameters(), pw = want.namedParameters();
  ASSERT_EQ(pg.size(), pw.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    EXPECT_LE(relativeError(fieldOf(pg[i].second, field), fieldOf(pw[i].second, field)), tolerance) << pg[i].first;
  }
}

double maxParameterError(const nn::Module& got, const nn::Module& want, ParameterField field) {
  const nn::NamedParameters pg = got.namedParameters(), pw = want.namedParameters();
  EXPECT_EQ(pg.size(), pw.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(pg.size(), pw.size()); ++i) {
    worst = std::max(worst, relativeError(fieldOf(pg[i].second, field), fieldOf(pw[i].second, field)));
  }
  return worst;
}

std::string parameterBytes(const nn::Module& model) {
  std::string out;
  for (const auto& [name, p] : model.namedParameters()) out += hostBytes(p.data());
  return out;
}

}  // namespace minidp::testing
