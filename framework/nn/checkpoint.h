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

/// Where a training state keeps the optimizer's tensors ("optimizer.<name>.exp_avg"): beside the
/// parameters, which keep their PyTorch names, so torch and --load still read the weights alone.
inline constexpr const char* kOptimizerPrefix = "optimizer.";
/// Where it keeps the comm hook's state ("comm_hook.powersgd.q.<name>"), likewise.
inline constexpr const char* kCommHookPrefix = "comm_hook.";

/// Writes every parameter in its dtype (float32, or float64 for fp64 runs) in registration order, then
/// `extra` tensors; nothing half-written on failure.
void saveCheckpoint(const Module& module, const std::string& path,
                    const std::map<std::string, std::string>& metadata = {},
                    const std::vector<std::pair<std::string, SafeTensor>>& extra = {});
/// Loads the tensors named `prefix + name` into the parameters, converted to each parameter's dtype and
/// device: bit for bit when the stored dtype is the parameter's, exactly when it widens (F32 into a
/// float64 parameter), rounded to nearest when it narrows (F64 into float32). A missing name, a wrong
/// shape or a value that is not finite is an error naming the tensor; with an empty prefix an extra name in the file is an error too,
/// except optimizer and comm hook state (kOptimizerPrefix, kCommHookPrefix); with a prefix, names outside
/// it are other content and ignored.
void loadParameters(Module& module, const SafeTensorFile& file, const std::string& prefix = "");
/// readSafetensors' filter for loadParameters(module, ·, prefix): checks each stored tensor's name, dtype
/// and shape against the module's parameters from the header alone, reads the parameters' tensors and
/// leaves out the rest (optimizer and comm hook state; with a prefix, names outside it); a name the module
/// does not have, a wrong shape or dtype refuses the file before any bytes are read.
SafeTensorFilter parameterFilter(const Module& module, const std::string& prefix = "");
/// loadParameters of a file, reading only the parameters (parameterFilter). Returns how the stored values
/// were converted when that was not bit for bit ("F64 rounded to float32"), else an empty string.
std::string loadCheckpoint(Module& module, const std::string& path);

}  // namespace minidp::nn
