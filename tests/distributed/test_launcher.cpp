// Launcher detection from environment variables (OpenMPI, Slurm srun, PMI, PMIx), the refusal of a
// launch MPI does not see, and the GPU choice.
#include <gtest/gtest.h>

#include <map>

#include "base/check.h"
#include "framework/distributed/job/launcher.h"

namespace minidp::distributed {
namespace {

LaunchInfo detect(const std::map<std::string, std::string>& env) {
  return detectLauncher([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

void expectInfo(const LaunchInfo& info, const std::string& launcher, int rank, int size, int localRank) {
  EXPECT_EQ(info.launcher, launcher);
  EXPECT_EQ(info.rank, rank);
  EXPECT_EQ(info.size, size);
  EXPECT_EQ(info.localRank, localRank);
}

TEST(Launcher, ReadsEachLaunchersVariables) {
  expectInfo(detect({}), "", -1, -1, -1);
  EXPECT_FALSE(detect({}).launched());
  expectInfo(
      detect({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}),
      "openmpi", 3, 8, 1);
  expectInfo(detect({{"SLURM_PROCID", "5"},
                     {"SLURM_STEP_NUM_TASKS", "16"},
                     {"SLURM_LOCALID", "2"},
                     {"SLURM_NTASKS", "16"},
                     {"PMIX_RANK", "5"}}),
             "slurm", 5, 16, 2);
  expectInfo(detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}}), "pmi", 1, 4, 0);
  expectInfo(detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"PMI_LOCAL_RANK", "3"}}), "pmi", 1, 4, 3);
  expectInfo(detect({{"PMIX_RANK", "2"}}), "pmix", 2, -1, -1);
  EXPECT_TRUE(detect({{"PMIX_RANK", "2"}}).launched());
}

TEST(Launcher, OpenMpiWinsAndAnSbatchScriptIsNoLaunch) {
  // mpirun inside a Slurm allocation: OpenMPI's own variables describe the job.
  expectInfo(detect({{"OMPI_COMM_WORLD_RANK", "0"},
                     {"OMPI_COMM_WORLD_SIZE", "2"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                     {"SLURM_PROCID", "0"},
                     {"SLURM_STEP_NUM_TASKS", "1"}}),
             "openmpi", 0, 2, 0);
  // A batch script: the allocation's variables, but no job step.
  EXPECT_FALSE(detect({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "77"}}).launched());
  // Garbage is "not said", not a number.
  expectInfo(detect({{"OMPI_COMM_WORLD_SIZE", "two"}, {"OMPI_COMM_WORLD_RANK", "-1"}}), "openmpi", -1, -1, -1);
}

TEST(Launcher, RefusesSeveralTasksThatMpiSeesAsOne) {
  const LaunchInfo srun = detect({{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_LOCALID", "1"}});
  try {
    checkLaunchAgrees(srun, 1);
    ADD_FAILURE() << "four srun tasks in a world of one must not start";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "the launcher (slurm, SLURM_STEP_NUM_TASKS=4) started 4 tasks but MPI reports a world of 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(checkLaunchAgrees(srun, 4));
  EXPECT_NO_THROW(checkLaunchAgrees(detect({{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}}), 1));
  EXPECT_NO_THROW(checkLaunchAgrees(detect({{"PMIX_RANK", "0"}}), 1));  // size unknown: nothing to compare
}

TEST(Launcher, GpuIsTheLocalRankModuloTheVisibleDevicesOrTheRequestedOne) {
  EXPECT_EQ(selectGpu(-1, 0, 2), 0);
  EXPECT_EQ(selectGpu(-1, 1, 2), 1);
  EXPECT_EQ(selectGpu(-1, 5, 2), 1);
  EXPECT_EQ(selectGpu(-1, 6, 4), 2);
  EXPECT_EQ(selectGpu(-1, -1, 4), 0);  // not launched: the first device
  EXPECT_EQ(selectGpu(3, 0, 4), 3);
  EXPECT_THROW(selectGpu(4, 0, 4), Error);
  EXPECT_THROW(selectGpu(-1, 0, 0), Error);
}

}  // namespace
}  // namespace minidp::distributed
