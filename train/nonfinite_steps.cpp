#include "train/nonfinite_steps.h"

#include <cmath>
#include <sstream>

#include "train/errors.h"

namespace minidp::train {

std::string nonFiniteUsageProblem(const Options& o) {
  if (o.skipNonFinite && o.cudaGraph)
    return "--skip-nonfinite decides on the host whether each step updates: not with --cuda-graph";
  return {};
}

void checkFiniteLoss(double loss, int64_t step, const Options& o) {
  if (std::isfinite(loss)) return;
  std::ostringstream os;
  os << "step " << step << ": the loss is " << loss << "; training diverged: lower --lr"
     << (o.lr > 0 ? " (" + shortNumber(o.lr) + ")" : std::string()) << " or check the data";
  throw AgreedError(os.str());
}

void checkFiniteStep(double loss, double norm, int64_t step, const Options& o) {
  if (o.skipNonFinite) return;
  checkFiniteLoss(loss, step, o);
  if (std::isfinite(norm)) return;
  std::ostringstream os;
  os << "step " << step << ": the gradient norm is " << norm << " (loss " << loss
     << "); nothing was saved after it: lower --lr, check the data and --resume state, or pass --skip-nonfinite to "
        "skip such steps";
  throw AgreedError(os.str());
}

}  // namespace minidp::train
