// Learning-rate schedules as llm.c and nanoGPT define them: linear warm-up from lr / warmup to lr, then
// constant, cosine or linear decay to lr * minLrFrac at the last step. A pure function of the step, so
// every rank computes the same value; the optimizer takes it as a scalar kernel argument.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace minidp::train {

/// The shape of the learning rate after the warm-up.
enum class LrScheduleKind { Constant, Cosine, Linear };

/// Flag spellings of LrScheduleKind (--lr-schedule takes these names only).
const std::map<std::string, LrScheduleKind>& lrScheduleNames();

/// A learning-rate schedule over `totalSteps` optimizer steps.
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double lr = 0;
  int64_t warmupSteps = 0;
  int64_t totalSteps = 1;
  double minLrFrac = 0;  // decay ends at lr * minLrFrac (cosine, linear)

  /// The learning rate of optimizer step `step`, counted from 0: lr * (step + 1) / warmupSteps during the
  /// warm-up; then, with r = (step - warmupSteps) / (totalSteps - 1 - warmupSteps) in [0, 1],
  /// min + (lr - min) * (1 + cos(pi r)) / 2 (cosine) or lr - (lr - min) * r (linear).
  double at(int64_t step) const;
};

}  // namespace minidp::train
