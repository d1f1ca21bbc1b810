#include "framework/nn/state_check.h"

#include <cmath>
#include <set>
#include <sstream>

namespace minidp::nn {

namespace {

std::string dtypeList(const std::vector<DType>& dtypes) {
  std::string text;
  for (DType d : dtypes) text += (text.empty() ? "" : " or ") + std::string(dtypeName(d));
  return text;
}

/// The first element of `values` that breaks the rule, as text ("NaN at element 3"), or empty.
template <typename T>
std::string firstBadElement(const std::vector<T>& values, const StateRule& rule) {
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = static_cast<double>(values[i]);
    std::ostringstream os;
    if (rule.finite && !std::isfinite(v)) {
      os << (std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf")) << " at element " << i << ", expected finite values";
      return os.str();
    }
    if (rule.integral && !(std::floor(v) == v && v >= rule.lo && v <= rule.hi)) {
      os.precision(17);
      os << v << " at element " << i << ", expected an integer in [" << rule.lo << ", " << rule.hi << "]";
      return os.str();
    }
  }
  return {};
}

}  // namespace

void checkStateTensor(const StateRule& rule, const Tensor& t, const std::string& what) {
  bool dtypeOk = false;
  for (DType d : rule.dtypes) dtypeOk = dtypeOk || d == t.dtype();
  MINIDP_CHECK(dtypeOk, "tensor '" << what << "' has dtype " << dtypeName(t.dtype()) << ", expected "
                                   << dtypeList(rule.dtypes));
  MINIDP_CHECK(t.shape() == rule.shape, "tensor '" << what << "' has shape " << shapeString(t.shape())
                                                   << ", expected " << shapeString(rule.shape));
  if (!rule.finite && !rule.integral) return;
  const Tensor host = t.to(Device::CPU);
  std::string bad;
  switch (t.dtype()) {
    case DType::F32: bad = firstBadElement(host.toVector<float>(), rule); break;
    case DType::F64: bad = firstBadElement(host.toVector<double>(), rule); break;
    case DType::I32: bad = firstBadElement(host.toVector<int32_t>(), rule); break;
    default: break;  // bf16 state is never kept
  }
  MINIDP_CHECK(bad.empty(), "tensor '" << what << "' holds " << bad);
}

void checkStateTensors(const std::vector<StateRule>& rules, const StoredTensor& find,
                       const std::vector<std::string>& stored, const std::string& prefix, const std::string& owner) {
  std::set<std::string> expected;
  for (const StateRule& rule : rules) {
    const std::string key = prefix + rule.name;
    expected.insert(key);
    const Tensor t = find(key);
    MINIDP_CHECK(t.defined(), "the file has no tensor '" << key << "' (" << owner << " keeps it: "
                                                         << dtypeList(rule.dtypes) << " " << shapeString(rule.shape)
                                                         << ")");
    checkStateTensor(rule, t, key);
  }
  for (const std::string& name : stored) {
    MINIDP_CHECK(name.compare(0, prefix.size(), prefix) != 0 || expected.count(name),
                 "the file holds tensor '" << name << "', which " << owner << " does not keep");
  }
}

}  // namespace minidp::nn
