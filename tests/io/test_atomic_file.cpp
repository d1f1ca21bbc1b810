// A process killed (SIGKILL) while it writes a checkpoint leaves the previous complete file or none,
// never a torn one; the temporaries it leaves are removed by removeStrayTemporaries at the next start, and
// only those: a live writer's stay. Nothing but a regular file is ever replaced; a failed write names the
// target and the cause.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/check.h"
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

std::string hostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// A process id that no process has now: a child that exited and was reaped.
pid_t goneProcess() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

void touch(const fs::path& path) { std::fclose(std::fopen(path.c_str(), "w")); }

TEST_F(AtomicFile, RemoveStrayTemporariesTakesOnlyThoseOfGoneWriters) {
  const fs::path target = dir_ / "a.safetensors";
  const std::string host = hostName(), gone = std::to_string(goneProcess()), live = std::to_string(getpid());
  const std::vector<std::string> stale = {"a.safetensors.tmp." + host + "." + gone + ".0",
                                          "a.safetensors.tmp." + gone + ".3"};  // as earlier versions named them
  const std::vector<std::string> kept = {"a.safetensors",
                                         "a.safetensors.tmp." + host + "." + live + ".0",  // a run saving now
                                         "a.safetensors.tmp.otherhost." + gone + ".0",  // its writer is not ours to see
                                         "b.safetensors.tmp." + host + "." + gone + ".0",
                                         "a.safetensorsx",
                                         "a.safetensors.tmp.notes"};
  for (const auto& names : {stale, kept}) {
    for (const std::string& name : names) touch(dir_ / name);
  }
  EXPECT_EQ(removeStrayTemporaries(target.string()), 2);
  for (const std::string& name : stale) EXPECT_FALSE(fs::exists(dir_ / name)) << name;
  for (const std::string& name : kept) EXPECT_TRUE(fs::exists(dir_ / name)) << name;
}

// The message of the minidp::Error `f` throws.
template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(AtomicFile, NeverReplacesWhatIsNotARegularFile) {
  const fs::path fifo = dir_ / "fifo", link = dir_ / "link", folder = dir_ / "folder", device = dir_ / "null";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  touch(dir_ / "file");
  fs::create_symlink(dir_ / "file", link);
  fs::create_directory(folder);
  const bool root = geteuid() == 0;  // a copy of /dev/null, made here: the real one is never touched
  if (root) ASSERT_EQ(mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  std::vector<std::pair<fs::path, std::string>> cases = {
      {fifo, "is a FIFO"}, {link, "is a symbolic link"}, {folder, "is a folder"}};
  if (root) cases.emplace_back(device, "is a character device");
  for (const auto& [path, kind] : cases) {
    const fs::file_type before = fs::symlink_status(path).type();
    for (const std::string& error : {errorOf([&] { writeFileAtomically(path.string(), "data"); }),
                                     errorOf([&] { checkWritableFile(path.string()); })}) {
      EXPECT_NE(error.find(path.string() + " " + kind), std::string::npos) << error;
    }
    EXPECT_EQ(fs::symlink_status(path).type(), before) << path;
    EXPECT_EQ(temporariesBeside(path), 0) << path;
  }
  EXPECT_EQ(fs::file_size(dir_ / "file"), 0u);  // the link's file is untouched too
  EXPECT_NE(errorOf([&] { checkWritableFile((dir_ / "missing" / "x").string()); }).find("does not exist"),
            std::string::npos);
  // A path through a file: the file is named as not a folder, not as a missing folder.
  EXPECT_NE(errorOf([&] {
              checkWritableFile((dir_ / "file" / "x").string());
            }).find((dir_ / "file").string() + " is a file, not a folder"),
            std::string::npos);
  EXPECT_EQ(errorOf([&] { checkWritableFile((dir_ / "new").string()); }), "");
  EXPECT_FALSE(fs::exists(dir_ / "new"));
  EXPECT_EQ(temporariesBeside(dir_ / "new"), 0);
}

// A write that fails (here the file size limit, as a full disk would) names the target and the cause, leaves
// the earlier file whole and no temporary.
TEST_F(AtomicFile, AFailedWriteNamesTheTargetAndTheCause) {
  const fs::path target = dir_ / "state.safetensors";
  writeFileAtomically(target.string(), "earlier");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing the process
    const rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    const std::string error = errorOf([&] { writeFileAtomically(target.string(), std::string(1 << 20, 'x')); });
    const bool named = error.find("cannot write " + target.string() + ": file too large") != std::string::npos;
    _exit(named && temporariesBeside(target) == 0 ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the error did not name the target and the cause";
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "earlier");
}

}  // namespace
}  // namespace minidp
