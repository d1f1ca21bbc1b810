#include "framework/distributed/job/launcher.h"

#include <algorithm>
#include <cstdlib>

#include "base/check.h"

namespace minidp::distributed {

namespace {

/// The integer value of variable `name`, -1 when unset or not a number.
int intVariable(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* value = getenv(name);
  if (!value || !*value) return -1;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return *end == '\0' && parsed >= 0 ? static_cast<int>(parsed) : -1;
}

}  // namespace

LaunchInfo detectLauncher(const std::function<const char*(const char*)>& getenv) {
  const auto get = [&](const char* name) { return intVariable(getenv, name); };
  LaunchInfo info;
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    info = {"openmpi", get("OMPI_COMM_WORLD_RANK"), get("OMPI_COMM_WORLD_SIZE"), get("OMPI_COMM_WORLD_LOCAL_RANK"),
            "OMPI_COMM_WORLD_SIZE"};
  } else if (getenv("SLURM_STEP_NUM_TASKS")) {
    info = {"slurm", get("SLURM_PROCID"), get("SLURM_STEP_NUM_TASKS"), get("SLURM_LOCALID"), "SLURM_STEP_NUM_TASKS"};
  } else if (getenv("PMI_SIZE")) {
    const int local = get("MPI_LOCALRANKID");
    info = {"pmi", get("PMI_RANK"), get("PMI_SIZE"), local >= 0 ? local : get("PMI_LOCAL_RANK"), "PMI_SIZE"};
  } else if (getenv("PMIX_RANK")) {
    info = {"pmix", get("PMIX_RANK"), -1, -1};
  }
  return info;
}

LaunchInfo detectLauncher() {
  return detectLauncher([](const char* name) -> const char* { return std::getenv(name); });
}

void checkLaunchAgrees(const LaunchInfo& info, int mpiWorld) {
  MINIDP_CHECK(!(info.size > 1 && mpiWorld == 1),
               "the launcher (" << info.launcher << ", " << info.sizeVariable << "=" << info.size << ") started "
                                << info.size
                                << " tasks but MPI reports a world of 1: minidp's MPI does not speak this "
                                   "launcher's protocol (srun: try --mpi=pmix, or build against the cluster's MPI); "
                                   "each task would train alone");
}

int selectGpu(int requested, int localRank, int visible) {
  MINIDP_CHECK(visible > 0, "no CUDA device is visible");
  if (requested >= 0) {
    MINIDP_CHECK(requested < visible, "--gpu " << requested << " but " << visible << " CUDA device(s) are visible");
    return requested;
  }
  return std::max(localRank, 0) % visible;
}

}  // namespace minidp::distributed
