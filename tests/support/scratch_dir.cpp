#include "tests/support/scratch_dir.h"

#include <unistd.h>

#include <string>

namespace minidp::testing {

namespace fs = std::filesystem;

void ScratchDirTest::SetUp() {
  // The pid keeps concurrent runs of the same test binary apart.
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = fs::path(::testing::TempDir()) /
         ("minidp_" + std::to_string(getpid()) + "_" + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir_);
  fs::create_directories(dir_);
}

void ScratchDirTest::TearDown() { fs::remove_all(dir_); }

}  // namespace minidp::testing
