// Launcher: what mpirun, srun or another PMI launcher tells a process through its environment (rank,
// world size, node-local rank), and the GPU a rank drives. Pure functions of the environment, so they
// are unit-tested without a launcher.
#pragma once

#include <functional>
#include <string>

namespace minidp::distributed {

/// What the launcher says about this process; -1 where it says nothing.
struct LaunchInfo {
  /// "openmpi", "slurm", "pmi", "pmix", or empty when no launcher started the process.
  std::string launcher;
  int rank = -1, size = -1, localRank = -1;
  std::string sizeVariable;  // the variable `size` came from, for messages
  bool launched() const { return !launcher.empty(); }
};

/// Reads, in this order: OpenMPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK); Slurm's srun inside
/// a job step (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID; sbatch alone sets no step, so a batch
/// script is not a launch); PMI (MPICH hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID or PMI_LOCAL_RANK); PMIx
/// (PMIX_RANK, the size unknown). `getenv` returns null for an unset variable.
LaunchInfo detectLauncher(const std::function<const char*(const char*)>& getenv);
/// detectLauncher on this process's environment.
LaunchInfo detectLauncher();

/// Throws when the launcher says there are several tasks but MPI reports a world of `mpiWorld` = 1: the
/// MPI minidp was built with does not speak the launcher's protocol, and every task would train alone.
void checkLaunchAgrees(const LaunchInfo& info, int mpiWorld);

/// The CUDA device a rank drives: `requested` (--gpu) when >= 0, which must be visible; otherwise the
/// node-local rank modulo the `visible` devices (more ranks than GPUs share them round-robin).
int selectGpu(int requested, int localRank, int visible);

}  // namespace minidp::distributed
