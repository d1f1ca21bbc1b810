// Learning-rate schedules step by step against torch.optim.lr_scheduler.LambdaLR with the llm.c / nanoGPT
// formula (tests/fixtures/lr_schedules, written by tests/reference/make_loop_fixtures.py).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "framework/io/safetensors.h"
#include "train/schedule.h"

namespace minidp {
namespace {

TEST(LrSchedule, EqualsTorchLambdaLrEveryStep) {
  const char* root = std::getenv("MINIDP_SOURCE_DIR");
  const SafeTensorFile f = readSafetensors(std::string(root ? root : ".") + "/tests/fixtures/lr_schedules.safetensors");
  ASSERT_EQ(f.metadata.size(), 6u);
  for (const auto& [name, spec] : f.metadata) {
    std::istringstream in(spec);
    std::string kind;
    train::LrSchedule s;
    in >> kind >> s.warmupSteps >> s.totalSteps >> s.minLrFrac >> s.lr;
    s.kind = train::lrScheduleNames().at(kind);
    const SafeTensor& want = f.at(name);
    ASSERT_EQ(want.shape, std::vector<int64_t>{s.totalSteps}) << name;
    std::vector<double> lrs(s.totalSteps);
    std::memcpy(lrs.data(), want.bytes.data(), want.bytes.size());
    for (int64_t step = 0; step < s.totalSteps; ++step)
      ASSERT_NEAR(s.at(step), lrs[step], 1e-15 * s.lr + 1e-12 * lrs[step]) << name << " step " << step;
    if (kind != "constant") EXPECT_NEAR(s.at(s.totalSteps - 1), s.lr * s.minLrFrac, 1e-15) << name;
  }
}

}  // namespace
}  // namespace minidp
