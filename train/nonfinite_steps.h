// A non-finite loss or gradient norm is never dropped: by default it stops the run (one line naming the step,
// nothing saved over a good checkpoint); with --skip-nonfinite a step whose gradients are not finite leaves the
// parameters and optimizer state as they were, and the log and metrics count the skipped steps.
#pragma once

#include <cstdint>
#include <string>

#include "train/options.h"

namespace minidp::train {

/// The rules of --skip-nonfinite as one line (not with --cuda-graph: the host decides per step); empty when none.
std::string nonFiniteUsageProblem(const Options& opts);

/// Throws AgreedError (every rank reads the same global loss) naming `step` when `loss` is NaN or infinite.
void checkFiniteLoss(double loss, int64_t step, const Options& opts);

/// Throws AgreedError naming `step` when `loss` or the gradient norm `norm` (both the same on every rank) is NaN
/// or infinite, unless --skip-nonfinite (then such a step was skipped and is reported in the log).
void checkFiniteStep(double loss, double norm, int64_t step, const Options& opts);

}  // namespace minidp::train
