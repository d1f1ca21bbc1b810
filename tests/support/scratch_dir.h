// A per-test scratch directory for tests that write files.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

namespace minidp::testing {

/// Gives each test an empty directory of its own under TempDir() (`dir_`) and removes it afterwards.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  std::filesystem::path dir_;
};

}  // namespace minidp::testing
