#include "framework/nn/checkpoint.h"

#include <cstring>
#include <set>

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

void loadParameters(Module& module, const SafeTensorFile& file, const std::string& prefix) {
  std::set<std::string> expected;
  for (auto& [name, param] : module.namedParameters()) {
    const std::string key = prefix + name;
    expected.insert(key);
    Tensor value = fromSafeTensor(file.at(key), key);
    MINIDP_CHECK(value.shape() == param.shape(), "tensor '" << key << "' has shape " << shapeString(value.shape())
                                                            << ", the model expects " << shapeString(param.shape()));
    Variable p = param;
    p.data().copyFrom(value.toDType(p.dtype()).to(p.device()));
  }
  if (!prefix.empty()) return;
  for (const auto& [name, tensor] : file.tensors) {
    if (name.compare(0, std::strlen(kOptimizerPrefix), kOptimizerPrefix) == 0) continue;
    if (name.compare(0, std::strlen(kCommHookPrefix), kCommHookPrefix) == 0) continue;
    MINIDP_CHECK(expected.count(name), "the file holds tensor '" << name << "', which the model does not have");
  }
}

void loadCheckpoint(Module& module, const std::string& path) {
  try {
    loadParameters(module, readSafetensors(path));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace minidp::nn
