// The models of the PyTorch reference fixtures (tests/reference/): where a fixture lies, and the minidp model
// its metadata describes (mlp, gpt or llama, with the fixture's sizes; parameters still to be loaded).
#pragma once

#include <memory>
#include <string>

#include "framework/io/safetensors.h"
#include "models/model.h"

namespace minidp::testing {

/// tests/fixtures/<name> under MINIDP_SOURCE_DIR (ctest sets it).
std::string fixturePath(const std::string& name);
/// The model a fixture's metadata names, built with its sizes.
std::unique_ptr<models::Model> buildReferenceModel(const SafeTensorFile& f);

}  // namespace minidp::testing
