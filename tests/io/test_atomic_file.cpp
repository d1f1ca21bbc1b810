// A process killed (SIGKILL) while it writes a checkpoint leaves the previous complete file or none,
// never a torn one; the temporaries it leaves are removed by removeStrayTemporaries at the next start.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "framework/io/atomic_file.h"
#include "framework/io/safetensors.h"
#include "tests/support/scratch_dir.h"

namespace minidp {
namespace {

namespace fs = std::filesystem;

using AtomicFile = testing::ScratchDirTest;

// 16 MiB per file: a write takes long enough to be killed in its middle.
std::vector<std::pair<std::string, SafeTensor>> bigState(uint8_t fill) {
  SafeTensor t;
  t.dtype = "F32";
  t.shape = {4 << 20};
  t.bytes.assign(static_cast<size_t>(t.shape[0]) * 4, fill);
  return {{"weight", t}};
}

int temporariesBeside(const fs::path& target) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(target.parent_path())) {
    n += entry.path().filename().string().rfind(target.filename().string() + ".tmp.", 0) == 0;
  }
  return n;
}

TEST_F(AtomicFile, KillDuringSaveLeavesTheOldFileOrNoneAndTemporariesAreSwept) {
  const fs::path target = dir_ / "state.safetensors";
  int killedMidWrite = 0;
  // Kills at varied moments until two landed mid-write (a loaded machine shifts the timing, so try more).
  for (int attempt = 0; attempt < 40 && (attempt < 6 || killedMidWrite < 2); ++attempt) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (uint8_t fill = 1;; ++fill) writeSafetensors(target.string(), bigState(fill));  // until killed
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(40 + 35 * (attempt % 8) + 7 * attempt));
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    const int left = temporariesBeside(target);
    killedMidWrite += left > 0;
    if (fs::exists(target)) {
      const SafeTensorFile file = readSafetensors(target.string());  // complete: it parses and checks sizes
      const std::vector<uint8_t>& bytes = file.at("weight").bytes;
      EXPECT_EQ(std::count(bytes.begin(), bytes.end(), bytes.front()), static_cast<long>(bytes.size()))
          << "a file mixes two saves";
    }
    EXPECT_EQ(removeStrayTemporaries(target.string()), left);
    EXPECT_EQ(temporariesBeside(target), 0);
  }
  EXPECT_GT(killedMidWrite, 0) << "no kill landed during a write: the test did not test anything";
}

TEST_F(AtomicFile, RemoveStrayTemporariesKeepsOtherFiles) {
  const fs::path target = dir_ / "a.safetensors";
  for (const char* name : {"a.safetensors", "a.safetensors.tmp.12.0", "a.safetensors.tmp.13.4", "b.safetensors.tmp.1.0",
                           "a.safetensorsx"}) {
    std::FILE* f = std::fopen((dir_ / name).c_str(), "w");
    std::fclose(f);
  }
  EXPECT_EQ(removeStrayTemporaries(target.string()), 2);
  EXPECT_TRUE(fs::exists(dir_ / "a.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "b.safetensors.tmp.1.0"));
  EXPECT_TRUE(fs::exists(dir_ / "a.safetensorsx"));
}

}  // namespace
}  // namespace minidp
