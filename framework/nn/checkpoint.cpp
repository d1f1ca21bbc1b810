#include "framework/nn/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "framework/nn/state_check.h"

namespace minidp::nn {

SafeTensor toSafeTensor(const Tensor& t) {
  Tensor host = t.to(Device::CPU);
  SafeTensor st;
  st.dtype = dtypeName(t.dtype());
  st.shape = t.shape();
  st.bytes.resize(host.nbytes());
  if (host.nbytes() > 0) std::memcpy(st.bytes.data(), host.raw(), host.nbytes());  // an empty tensor has no data
  return st;
}

Tensor fromSafeTensor(const SafeTensor& st, const std::string& name) {
  DType dtype;
  if (st.dtype == "F32") {
    dtype = DType::F32;
  } else if (st.dtype == "F64") {
    dtype = DType::F64;
  } else if (st.dtype == "I32") {
    dtype = DType::I32;
  } else {
    throwError("tensor '" + name + "' has dtype " + st.dtype + "; minidp reads F32, F64 and I32", __FILE__, __LINE__);
  }
  return Tensor::fromHost(st.bytes.data(), st.shape, dtype, Device::CPU);
}

void saveCheckpoint(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata,
                    const std::vector<std::pair<std::string, SafeTensor>>& extra) {
  std::vector<std::pair<std::string, SafeTensor>> tensors;
  for (const auto& [name, param] : module.namedParameters()) tensors.emplace_back(name, toSafeTensor(param.data()));
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  writeSafetensors(path, tensors, metadata);
}

namespace {

// The dtype of a stored parameter as minidp reads it; an error naming the tensor for any other.
DType storedDType(const SafeTensor& st, const std::string& name) {
  if (st.dtype == "F32") return DType::F32;
  if (st.dtype == "F64") return DType::F64;
  throwError("tensor '" + name + "' has dtype " + st.dtype + "; parameters are read from F32 or F64", __FILE__,
             __LINE__);
}

bool isStateName(const std::string& name) {
  return name.compare(0, std::strlen(kOptimizerPrefix), kOptimizerPrefix) == 0 ||
         name.compare(0, std::strlen(kCommHookPrefix), kCommHookPrefix) == 0;
}

}  // namespace

void loadParameters(Module& module, const SafeTensorFile& file, const std::string& prefix) {
  std::set<std::string> expected;
  for (auto& [name, param] : module.namedParameters()) {
    const std::string key = prefix + name;
    expected.insert(key);
    const auto stored = std::find_if(file.tensors.begin(), file.tensors.end(),
                                     [&key](const auto& named) { return named.first == key; });
    MINIDP_CHECK(stored != file.tensors.end(), "the file has no tensor '" << key << "' (the model's parameter of shape "
                                                                          << shapeString(param.shape()) << ")");
    Tensor value = fromSafeTensor(stored->second, key);
    MINIDP_CHECK(value.shape() == param.shape(), "tensor '" << key << "' has shape " << shapeString(value.shape())
                                                            << ", the model expects " << shapeString(param.shape()));
    checkStateTensor({key, {value.dtype()}, param.shape()}, value, key);  // finite
    Variable p = param;
    p.data().copyFrom(value.toDType(p.dtype()).to(p.device()));
  }
  if (!prefix.empty()) return;
  for (const auto& [name, tensor] : file.tensors) {
    if (isStateName(name)) continue;
    MINIDP_CHECK(expected.count(name), "the file holds tensor '" << name << "', which the model does not have");
  }
}

SafeTensorFilter parameterFilter(const Module& module, const std::string& prefix) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, param] : module.namedParameters()) shapes[prefix + name] = param.shape();
  return [shapes, prefix](const std::string& name, const SafeTensor& header) {
    const auto it = shapes.find(name);
    if (it == shapes.end()) {
      MINIDP_CHECK(!prefix.empty() || isStateName(name),
                   "the file holds tensor '" << name << "', which the model does not have");
      return false;
    }
    storedDType(header, name);
    MINIDP_CHECK(header.shape == it->second, "tensor '" << name << "' has shape " << shapeString(header.shape)
                                                        << ", the model expects " << shapeString(it->second));
    return true;
  };
}

std::string loadCheckpoint(Module& module, const std::string& path) {
  std::set<std::string> conversions;
  try {
    const SafeTensorFile file = readSafetensors(path, parameterFilter(module));
    loadParameters(module, file);
    for (const auto& [name, param] : module.namedParameters()) {
      const DType stored = storedDType(file.at(name), name);
      if (stored != param.dtype()) {
        conversions.insert(std::string(dtypeName(stored)) +
                           (dtypeSize(stored) > dtypeSize(param.dtype()) ? " rounded to " : " widened to ") +
                           (param.dtype() == DType::F64 ? "float64 (exactly)" : "float32"));
      }
    }
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
  std::string text;
  for (const std::string& c : conversions) text += (text.empty() ? "" : ", ") + c;
  return text;
}

}  // namespace minidp::nn
