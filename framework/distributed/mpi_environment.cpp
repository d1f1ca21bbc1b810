#include "framework/distributed/mpi_environment.h"

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "framework/distributed/comm_thread.h"
#include "framework/distributed/launcher.h"

namespace minidp::distributed {

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

MpiEnvironment::MpiEnvironment() {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  MINIDP_CHECK(!initialized, "MPI is already initialised: create one MpiEnvironment per process");
  int provided = MPI_THREAD_SINGLE;
  MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    MINIDP_CHECK(false, "MPI provides thread level " << provided << ", minidp needs MPI_THREAD_SERIALIZED ("
                                                     << MPI_THREAD_SERIALIZED << "): its comm thread calls MPI");
  }
  // Errors come back as codes, so MPI_CHECK turns them into exceptions with the failed call.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &world_));
  checkLaunchAgrees(detectLauncher(), world_);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &localRank_));
  MPI_CHECK(MPI_Comm_size(node, &localSize_));
  MPI_CHECK(MPI_Comm_free(&node));
  thread_ = std::make_unique<CommThread>();  // from here on, MPI is called on this thread only
}

MpiEnvironment::~MpiEnvironment() {
  thread_.reset();
  if (MPI_Comm_free(&comm_) != MPI_SUCCESS) std::fprintf(stderr, "minidp: MPI_Comm_free failed\n");
  const int status = MPI_Finalize();
  if (status != MPI_SUCCESS) {
    std::fprintf(stderr, "minidp: MPI_Finalize failed: %s\n", mpiErrorString(status).c_str());
  }
}

std::shared_ptr<CpuWork> MpiEnvironment::post(std::function<void()> task, std::string tag, size_t bytes) {
  return thread_->post(std::move(task), std::move(tag), bytes);
}

void MpiEnvironment::execute(std::function<void()> task, std::string tag) {
  thread_->execute(std::move(task), std::move(tag));
}

std::vector<std::string> MpiEnvironment::allGather(const std::string& bytes) {
  MINIDP_CHECK(bytes.size() <= INT_MAX, "allGather of " << bytes.size() << " bytes");
  std::vector<std::string> out(world_);
  execute(
      [&] {
        const int mine = static_cast<int>(bytes.size());
        std::vector<int> lengths(world_), offsets(world_);
        MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_));
        long long total = 0;
        for (int r = 0; r < world_; ++r) {
          offsets[r] = static_cast<int>(total);
          total += lengths[r];
        }
        MINIDP_CHECK(total <= INT_MAX, "allGather of " << total << " bytes in all");
        std::string all(static_cast<size_t>(total), '\0');
        MPI_CHECK(MPI_Allgatherv(bytes.data(), mine, MPI_BYTE, all.data(), lengths.data(), offsets.data(),
                                 MPI_BYTE, comm_));
        for (int r = 0; r < world_; ++r) out[r] = all.substr(offsets[r], lengths[r]);
      },
      "allgather");
  return out;
}

void MpiEnvironment::broadcastBytes(void* data, size_t bytes, int root) {
  MINIDP_CHECK(root >= 0 && root < world_, "broadcast from rank " << root << " of " << world_);
  MINIDP_CHECK(bytes <= INT_MAX, "broadcast of " << bytes << " bytes");
  execute([&] { MPI_CHECK(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_)); }, "broadcast");
}

bool MpiEnvironment::launchedByMpirun() { return detectLauncher().launched(); }

void MpiEnvironment::abortAll(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  std::fflush(stdout);
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace minidp::distributed
