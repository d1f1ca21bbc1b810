// Comparisons of two models' parameters, in registration order: the loops the model, checkpoint and
// data-parallel suites share.
#pragma once

#include <string>

#include "framework/nn/module.h"

namespace minidp::testing {

/// Which tensor of each parameter a comparison reads.
enum class ParameterField { Data, Grad };

/// Expects `a` and `b` to list the same parameter names and shapes with bit-identical values.
void expectSameParameters(const nn::Module& a, const nn::Module& b);
/// Expects each parameter's `field` in `got` within relative error `tolerance` (relativeError) of the same
/// parameter's in `want`, naming the one that is not.
void expectParametersNear(const nn::Module& got, const nn::Module& want, ParameterField field, double tolerance);
/// The largest relative error of a parameter's `field` in `got` against `want`.
double maxParameterError(const nn::Module& got, const nn::Module& want, ParameterField field = ParameterField::Data);
/// Every parameter's bytes (on the host) in registration order: equal strings mean bit-identical models.
std::string parameterBytes(const nn::Module& model);

}  // namespace minidp::testing
