// Module parameters to and from safetensors files, under their dotted names (PyTorch state_dict names).
#pragma once

#include <map>
#include <string>

#include "framework/io/safetensors.h"
#include "framework/nn/module.h"

namespace minidp::nn {

/// A host copy of `t` in safetensors form (dtype name, shape, bytes).
SafeTensor toSafeTensor(const Tensor& t);
/// A CPU tensor from a stored F32, F64 or I32 tensor; `name` is used in errors.
Tensor fromSafeTensor(const SafeTensor& st, const std::string& name);

/// Writes every parameter as float32 in registration order; nothing half-written on failure.
void saveCheckpoint(const Module& module, const std::string& path,
                    const std::map<std::string, std::string>& metadata = {});
/// Loads the tensors named `prefix + name` into the parameters (converted to each parameter's dtype and
/// device). A missing name or a wrong shape is an error naming the tensor; with an empty prefix an extra
/// name in the file is an error too (with a prefix, names outside it are other content and ignored).
void loadParameters(Module& module, const SafeTensorFile& file, const std::string& prefix = "");
/// loadParameters of a whole file.
void loadCheckpoint(Module& module, const std::string& path);

}  // namespace minidp::nn
