#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace minidp::train {

const std::map<std::string, LrScheduleKind>& lrScheduleNames() {
  static const std::map<std::string, LrScheduleKind> names{
      {"constant", LrScheduleKind::Constant}, {"cosine", LrScheduleKind::Cosine}, {"linear", LrScheduleKind::Linear}};
  return names;
}

double LrSchedule::at(int64_t step) const {
  if (step < warmupSteps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmupSteps);
  if (kind == LrScheduleKind::Constant) return lr;
  const double span = static_cast<double>(std::max<int64_t>(totalSteps - 1 - warmupSteps, 1));
  const double r = std::clamp(static_cast<double>(step - warmupSteps) / span, 0.0, 1.0);
  const double minLr = lr * minLrFrac;
  if (kind == LrScheduleKind::Cosine) return minLr + (lr - minLr) * 0.5 * (1.0 + std::cos(M_PI * r));
  return lr - (lr - minLr) * r;
}

}  // namespace minidp::train
