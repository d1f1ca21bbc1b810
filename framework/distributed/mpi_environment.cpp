#include "framework/distributed/mpi_environment.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "framework/distributed/comm_thread.h"
#include "framework/distributed/launcher.h"
#include "framework/distributed/watchdog.h"

namespace minidp::distributed {

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

namespace {

// Who may call MPI_Abort: any thread under MPI_THREAD_MULTIPLE, else only the MPI thread.
std::atomic<int> gThreadLevel{MPI_THREAD_SINGLE};
std::atomic<std::thread::id> gMpiThread{};

std::string secondsText(double seconds) {
  std::ostringstream os;
  os << seconds;
  return os.str();
}

[[noreturn]] void endProcess() {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);  // the job is stuck in MPI: no destructors, no MPI_Abort from inside MPI's own call
}

}  // namespace

thread_local std::string tExchangeLabel;

ExchangeLabel::ExchangeLabel(std::string what) : previous_(std::move(tExchangeLabel)) {
  tExchangeLabel = std::move(what);
}

ExchangeLabel::~ExchangeLabel() { tExchangeLabel = std::move(previous_); }

std::string ExchangeLabel::current(const std::string& fallback) {
  return tExchangeLabel.empty() ? fallback : tExchangeLabel;
}

MpiEnvironment::MpiEnvironment(double deadlineSeconds) : deadlineSeconds_(deadlineSeconds) {
  MINIDP_CHECK(deadlineSeconds > 0, "the MPI deadline must be positive, got " << deadlineSeconds);
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  MINIDP_CHECK(!initialized, "MPI is already initialised: create one MpiEnvironment per process");
  {
    const std::string rankText = std::getenv("OMPI_COMM_WORLD_RANK") ? std::getenv("OMPI_COMM_WORLD_RANK") : "?";
    Deadline startUp(deadlineSeconds,
                     "minidp watchdog: rank " + rankText + ": MPI start-up did not complete within " +
                         secondsText(deadlineSeconds) + " s (a rank did not start, or stopped); aborting",
                     endProcess);
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &threadLevel_));
    if (threadLevel_ < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      MINIDP_CHECK(false, "MPI provides thread level " << threadLevel_ << ", minidp needs MPI_THREAD_SERIALIZED ("
                                                       << MPI_THREAD_SERIALIZED << "): its comm thread calls MPI");
    }
    gThreadLevel = threadLevel_;
    // Errors come back as codes, so MPI_CHECK turns them into exceptions with the failed call.
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
    try {
      checkLaunchAgrees(detectLauncher(), world_);
    } catch (...) {
      MPI_Finalize();
      throw;
    }
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &censusComm_));
    MPI_Comm node = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &localRank_));
    MPI_CHECK(MPI_Comm_size(node, &localSize_));
    MPI_CHECK(MPI_Comm_free(&node));
  }
  thread_ = std::make_unique<CommThread>();  // from here on, MPI is called on this thread only
  thread_->execute([] { gMpiThread = std::this_thread::get_id(); }, "MPI thread id");
}

MpiEnvironment::~MpiEnvironment() {
  if (world_ > 1) {
    // MPI_Finalize may return on one rank while another is stopped, leaving mpirun waiting for ever: a
    // barrier against the deadline first names the rank that did not come.
    try {
      thread_->execute(
          [this] {
            exchange("the barrier before MPI_Finalize",
                     {[this](MPI_Request* r) { MPI_CHECK(MPI_Ibarrier(comm_, r)); }});
          },
          "finalize barrier");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "minidp: the barrier before MPI_Finalize failed: %s\n", e.what());
    }
  }
  thread_.reset();
  if (MPI_Comm_free(&censusComm_) != MPI_SUCCESS || MPI_Comm_free(&comm_) != MPI_SUCCESS) {
    std::fprintf(stderr, "minidp: MPI_Comm_free failed\n");
  }
  gMpiThread = std::this_thread::get_id();  // MPI_Finalize and after: this thread
  Deadline finalize(deadlineSeconds_,
                    "minidp watchdog: rank " + std::to_string(rank_) + ": MPI_Finalize did not complete within " +
                        secondsText(deadlineSeconds_) + " s (another rank stopped before its end); aborting",
                    endProcess);
  const int status = MPI_Finalize();
  if (status != MPI_SUCCESS) {
    std::fprintf(stderr, "minidp: MPI_Finalize failed: %s\n", mpiErrorString(status).c_str());
  }
}

void MpiEnvironment::exchange(const std::string& tag, const std::vector<std::function<void(MPI_Request*)>>& stages) {
  ++exchanges_;
  const double deadline = hostNowMs() + deadlineSeconds_ * 1000.0;
  for (const auto& stage : stages) {
    MPI_Request request = MPI_REQUEST_NULL;
    stage(&request);
    for (int done = 0;;) {
      MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) break;
      if (hostNowMs() > deadline) {
        const std::string missing = census(tag);
        std::fprintf(stderr, "minidp watchdog: rank %d: %s did not complete within %s s: %s; aborting every rank\n",
                     rank_, tag.c_str(), secondsText(deadlineSeconds_).c_str(),
                     missing.empty() ? "a rank stopped, or ranks issued different exchanges" : missing.c_str());
        abortAll(1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

std::string MpiEnvironment::census(const std::string& waitingIn) {
  const bool mayCall = threadLevel_ == MPI_THREAD_MULTIPLE || gMpiThread.load() == std::this_thread::get_id();
  if (world_ == 1 || !mayCall || censusTaken_.exchange(true)) return {};
  // Fixed-size messages: what each rank waits in, truncated. The buffers are members: the sends and late
  // receives may still use them after this returns, until the abort.
  constexpr int kCensusTag = 1;
  censusNotes_.assign(world_, CensusNote{});
  const char* mine = censusNotes_[rank_].data();
  waitingIn.copy(censusNotes_[rank_].data(), censusNotes_[rank_].size() - 1);
  std::vector<MPI_Request> received(world_, MPI_REQUEST_NULL);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    MPI_Request sent = MPI_REQUEST_NULL;
    const int length = static_cast<int>(censusNotes_[r].size());
    if (MPI_Isend(mine, length, MPI_CHAR, r, kCensusTag, censusComm_, &sent) == MPI_SUCCESS) {
      MPI_Request_free(&sent);  // never waited for: a stopped rank does not take it
    }
    MPI_Irecv(censusNotes_[r].data(), length, MPI_CHAR, r, kCensusTag, censusComm_, &received[r]);
  }
  // The other ranks' deadlines expire within the spread of their arrival at the collective.
  const double graceMs = std::min(deadlineSeconds_ / 2, 5.0) * 1000.0;
  const double end = hostNowMs() + graceMs;
  std::vector<int> heard(world_, 0);
  heard[rank_] = 1;
  for (bool all = false; !all && hostNowMs() < end;) {
    all = true;
    for (int r = 0; r < world_; ++r) {
      if (!heard[r] && MPI_Test(&received[r], &heard[r], MPI_STATUS_IGNORE) != MPI_SUCCESS) heard[r] = 0;
      all = all && heard[r];
    }
    if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string silent, elsewhere;
  for (int r = 0; r < world_; ++r) {
    if (!heard[r]) {
      silent += (silent.empty() ? "" : ", ") + std::to_string(r);
    } else if (r != rank_ && std::string(censusNotes_[r].data()) != mine) {
      elsewhere += "; rank " + std::to_string(r) + " waits in '" + censusNotes_[r].data() + "'";
    }
  }
  if (silent.empty() && elsewhere.empty()) return "every rank arrived, the collective itself stalled";
  return (silent.empty() ? "" : "rank(s) " + silent + " did not arrive") +
         (silent.empty() ? elsewhere.substr(2) : elsewhere);
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
  const std::string label = ExchangeLabel::current("allgather");
  execute(
      [&] {
        const int mine = static_cast<int>(bytes.size());
        std::vector<int> lengths(world_), offsets(world_);
        std::string all;
        exchange(label + " (exchange #" + std::to_string(exchanges_ + 1) + ")",
                 {[&](MPI_Request* r) {
                    MPI_CHECK(MPI_Iallgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_, r));
                  },
                  [&](MPI_Request* r) {
                    long long total = 0;
                    for (int i = 0; i < world_; ++i) {
                      offsets[i] = static_cast<int>(total);
                      total += lengths[i];
                    }
                    MINIDP_CHECK(total <= INT_MAX, "allGather of " << total << " bytes in all");
                    all.assign(static_cast<size_t>(total), '\0');
                    MPI_CHECK(MPI_Iallgatherv(bytes.data(), mine, MPI_BYTE, all.data(), lengths.data(), offsets.data(),
                                              MPI_BYTE, comm_, r));
                  }});
        for (int r = 0; r < world_; ++r) out[r] = all.substr(offsets[r], lengths[r]);
      },
      "allgather");
  return out;
}

void MpiEnvironment::broadcastBytes(void* data, size_t bytes, int root) {
  MINIDP_CHECK(root >= 0 && root < world_, "broadcast from rank " << root << " of " << world_);
  MINIDP_CHECK(bytes <= INT_MAX, "broadcast of " << bytes << " bytes");
  const std::string label = ExchangeLabel::current("broadcast");
  execute(
      [&] {
        exchange(label + " (exchange #" + std::to_string(exchanges_ + 1) + ")", {[&](MPI_Request* r) {
                   MPI_CHECK(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_, r));
                 }});
      },
      "broadcast");
}

bool MpiEnvironment::launchedByMpirun() { return detectLauncher().launched(); }

void MpiEnvironment::abortAll(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  std::fflush(stdout);
  std::fflush(stderr);
  const bool mayCall = gThreadLevel == MPI_THREAD_MULTIPLE || gMpiThread.load() == std::this_thread::get_id();
  if (initialized && !finalized && mayCall) MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace minidp::distributed
