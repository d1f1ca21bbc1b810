#include "framework/distributed/job/mpi_environment.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "framework/distributed/job/comm_thread.h"
#include "framework/distributed/job/launcher.h"
#include "framework/distributed/job/watchdog.h"

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

// Ending the job: the kinds of notes, their tag, and the environment whose listener runs (abortAll's).
constexpr int kFailed = 1, kQuit = 2, kDone = 3;
constexpr int kNoteTag = 2;
constexpr int kRunning = 0, kThisFailed = 1, kOtherFailed = 2;
std::atomic<MpiEnvironment*> gLive{nullptr};

/// The variable that holds a process's rank under `launcher` (launcher.h's names).
const char* rankVariable(const std::string& launcher) {
  if (launcher == "slurm") return "SLURM_PROCID";
  if (launcher == "pmi") return "PMI_RANK";
  if (launcher == "pmix") return "PMIX_RANK";
  return "OMPI_COMM_WORLD_RANK";
}

/// This process's siblings (the processes the same launcher daemon started on this node) by rank, each with
/// its /proc state letter (T or t: stopped).
std::map<int, char> siblingStates(const LaunchInfo& info) {
  namespace fs = std::filesystem;
  const std::string key = std::string(rankVariable(info.launcher)) + "=";
  const pid_t parent = ::getppid(), self = ::getpid();
  std::map<int, char> states;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::stol(name) == self) continue;
    std::ifstream statFile(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(statFile)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 1));
    char state = 0;
    long ppid = 0;
    if (!(fields >> state >> ppid) || ppid != parent) continue;
    std::ifstream environFile(entry.path() / "environ", std::ios::binary);
    std::string environ((std::istreambuf_iterator<char>(environFile)), std::istreambuf_iterator<char>());
    for (size_t begin = 0, end; begin < environ.size(); begin = end + 1) {
      end = environ.find('\0', begin);
      if (end == std::string::npos) end = environ.size();
      if (environ.compare(begin, key.size(), key) == 0) {
        states[std::atoi(environ.c_str() + begin + key.size())] = state;
        break;
      }
    }
  }
  return states;
}

bool isStopped(char state) { return state == 'T' || state == 't'; }

/// The census of MPI_Init and MPI_Finalize, where MPI cannot be asked, from /proc (siblingStates). Names the
/// stopped ones; else, in a world of two, the other rank; empty when it cannot tell. Null when a rank has exited
/// (every rank of the job runs on this node, and one is gone): the job is ending, and that rank (or mpirun)
/// says why.
std::optional<std::string> missingWithoutMpi(const LaunchInfo& info) {
  std::set<int> stopped, present;
  for (const auto& [rank, state] : siblingStates(info)) {
    present.insert(rank);
    if (isStopped(state)) stopped.insert(rank);
  }
  std::string ranks;
  for (const int r : stopped) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty()) return "rank(s) " + ranks + " did not arrive (stopped)";
  const char* localSize = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (info.size > 1 && localSize && std::atoi(localSize) == info.size &&
      static_cast<int>(present.size()) + 1 < info.size)
    return std::nullopt;
  if (info.size == 2 && (info.rank == 0 || info.rank == 1))
    return "rank(s) " + std::to_string(1 - info.rank) + " did not arrive";
  return std::string();
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
    // The line is written when the deadline expires: by then the /proc census can see a stopped rank.
    Deadline startUp(deadlineSeconds, "", [deadlineSeconds] {
      const LaunchInfo info = detectLauncher();
      const std::optional<std::string> missing = missingWithoutMpi(info);
      if (missing) {
        std::fprintf(stderr, "minidp watchdog: rank %s: MPI start-up did not complete within %s s: %s; aborting\n",
                     info.rank >= 0 ? std::to_string(info.rank).c_str() : "?", secondsText(deadlineSeconds).c_str(),
                     missing->empty() ? "a rank did not start, or stopped" : missing->c_str());
      }
      endProcess();
    });
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
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &notesComm_));
    MPI_Comm node = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &localRank_));
    MPI_CHECK(MPI_Comm_size(node, &localSize_));
    MPI_CHECK(MPI_Comm_free(&node));
  }
  thread_ = std::make_unique<CommThread>();  // from here on, MPI is called on this thread only
  thread_->execute([] { gMpiThread = std::this_thread::get_id(); }, "MPI thread id");
  // ... and on the listener's, for the notes (with MPI_THREAD_MULTIPLE; without it, failures abort).
  if (world_ > 1 && threadLevel_ == MPI_THREAD_MULTIPLE) {
    heard_.assign(world_, Heard{});
    MPI_CHECK(MPI_Irecv(&inbox_, sizeof(Note), MPI_BYTE, MPI_ANY_SOURCE, kNoteTag, notesComm_, &inboxRequest_));
    listener_ = std::thread([this] { listen(); });
    gLive = this;
  }
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
  // Past the barrier every rank is done: no note can come. The listener cancels its receive and ends.
  if (listener_.joinable()) {
    gLive = nullptr;
    stopListening_ = true;
    listener_.join();
  }
  thread_.reset();
  if (MPI_Comm_free(&notesComm_) != MPI_SUCCESS || MPI_Comm_free(&censusComm_) != MPI_SUCCESS ||
      MPI_Comm_free(&comm_) != MPI_SUCCESS) {
    std::fprintf(stderr, "minidp: MPI_Comm_free failed\n");
  }
  gMpiThread = std::this_thread::get_id();  // MPI_Finalize and after: this thread
  // A rank stopped after it posted its part of the barrier lets the barrier complete here: MPI_Finalize's
  // own barrier waits for it. After that barrier nothing can tell (only mpirun, which waits for it).
  Deadline finalize(deadlineSeconds_, "", [this] {
    const std::optional<std::string> missing = missingWithoutMpi(detectLauncher());
    if (missing) {
      std::fprintf(stderr, "minidp watchdog: rank %d: MPI_Finalize did not complete within %s s: %s; aborting\n", rank_,
                   secondsText(deadlineSeconds_).c_str(),
                   missing->empty() ? "another rank stopped before its end" : missing->c_str());
    }
    endProcess();
  });
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
    // Polled without a pause for the first millisecond (as MPI's blocking collectives spin): an exchange every
    // step (the stop-signal agreement) must not add a sleep's latency to the collectives queued behind it.
    const double spinUntil = hostNowMs() + 1.0;
    for (int done = 0;;) {
      MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) break;
      if (hostNowMs() > deadline) {
        const std::string missing = census(tag);
        const std::string line = "minidp watchdog: rank " + std::to_string(rank_) + ": " + tag +
                                 " did not complete within " + secondsText(deadlineSeconds_) + " s: " +
                                 (missing.empty() ? "a rank stopped, or ranks issued different exchanges" : missing) +
                                 "; aborting every rank";
        if (listener_.joinable()) endJob(1, line, [line](bool) { return line; });
        std::fprintf(stderr, "%s\n", line.c_str());
        abortAll(1);
      }
      if (hostNowMs() > spinUntil) std::this_thread::sleep_for(std::chrono::microseconds(100));
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
  // The other ranks' deadlines expire within the spread of their arrival at the collective (plus a watchdog
  // period of 0.25 s at most): a third of the deadline leaves the job's end within the deadline + 3 s.
  // The wait ends early when every rank not heard from is a sibling on this node that /proc shows stopped: it
  // will not answer, and waiting the rest of the grace only delays the job's end.
  const double graceMs = std::min(deadlineSeconds_ / 3, 2.5) * 1000.0;
  const double end = hostNowMs() + graceMs;
  const LaunchInfo launch = detectLauncher();
  std::vector<int> heard(world_, 0);
  heard[rank_] = 1;
  for (bool all = false, stoppedOnly = false; !all && !stoppedOnly && hostNowMs() < end;) {
    all = true;
    for (int r = 0; r < world_; ++r) {
      if (!heard[r] && MPI_Test(&received[r], &heard[r], MPI_STATUS_IGNORE) != MPI_SUCCESS) heard[r] = 0;
      all = all && heard[r];
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::map<int, char> siblings = siblingStates(launch);
    stoppedOnly = true;
    for (int r = 0; r < world_ && stoppedOnly; ++r) {
      const auto sibling = siblings.find(r);
      stoppedOnly = heard[r] || (sibling != siblings.end() && isStopped(sibling->second));
    }
  }
  {
    std::lock_guard<std::mutex> lock(notesMutex_);  // endJob need not wait for these again
    censusSilent_ = std::vector<bool>(heard.begin(), heard.end());
    censusSilent_.flip();
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

std::shared_ptr<CpuWork> MpiEnvironment::allReduceMax(int value, std::shared_ptr<int> result, const std::string& tag) {
  return post(
      [this, value, result, tag] {
        int mine = value;
        exchange(tag + " (exchange #" + std::to_string(exchanges_ + 1) + ")", {[&](MPI_Request* r) {
                   MPI_CHECK(MPI_Iallreduce(&mine, result.get(), 1, MPI_INT, MPI_MAX, comm_, r));
                 }});
      },
      tag, sizeof(int));
}

bool MpiEnvironment::launchedByMpirun() { return detectLauncher().launched(); }

double MpiEnvironment::graceSeconds() const { return std::min(deadlineSeconds_ / 2, 5.0); }

void MpiEnvironment::sendNote(int kind, int code, const std::string& text) {
  std::lock_guard<std::mutex> lock(notesMutex_);
  Note& note = outbox_.emplace_back();
  note.kind = kind;
  note.code = code;
  text.copy(note.text.data(), note.text.size() - 1);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&note, sizeof(Note), MPI_BYTE, r, kNoteTag, notesComm_, &request) == MPI_SUCCESS) {
      sends_.push_back(request);
    }
  }
}

void MpiEnvironment::flushNotes(double seconds) {
  const double end = hostNowMs() + seconds * 1000.0;
  for (;;) {
    bool all = true;
    {
      std::lock_guard<std::mutex> lock(notesMutex_);
      for (MPI_Request& request : sends_) {
        int done = request == MPI_REQUEST_NULL;
        if (!done && MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
        all = all && done;
      }
    }
    if (all || hostNowMs() > end) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void MpiEnvironment::waitForNotes(double seconds, const std::function<bool()>& ready) {
  std::unique_lock<std::mutex> lock(notesMutex_);
  notesChanged_.wait_for(lock, std::chrono::duration<double>(seconds), ready);
}

void MpiEnvironment::listen() {
  double quitSince = 0, failureSeen = -1;
  int quitCode = 1;
  while (!stopListening_) {
    for (int received = 1; received;) {
      MPI_Status status;
      if (MPI_Test(&inboxRequest_, &received, &status) != MPI_SUCCESS || !received) break;
      {
        std::lock_guard<std::mutex> lock(notesMutex_);
        Heard& from = heard_.at(status.MPI_SOURCE);
        if (inbox_.kind == kDone) {
          from.done = true;
        } else {
          from.kind = inbox_.kind;
          from.message.assign(inbox_.text.data(), strnlen(inbox_.text.data(), inbox_.text.size()));
          if (inbox_.kind == kFailed) quitCode = inbox_.code;
        }
      }
      notesChanged_.notify_all();
      MPI_Irecv(&inbox_, sizeof(Note), MPI_BYTE, MPI_ANY_SOURCE, kNoteTag, notesComm_, &inboxRequest_);
    }
    bool anyFailed = false, anyDone = false;
    {
      std::lock_guard<std::mutex> lock(notesMutex_);
      for (const Heard& h : heard_) {
        anyFailed = anyFailed || h.kind == kFailed;
        anyDone = anyDone || h.done;
      }
    }
    // Another rank failed. The same check often fails here a moment later (every rank runs the same code on
    // the same data): a short wait lets it, so that the line says the error once, for every rank. Then this
    // rank answers, and leaves the line to the failed one.
    if (anyFailed && failureSeen < 0) failureSeen = hostNowMs();
    int running = kRunning;
    if (anyFailed && hostNowMs() - failureSeen > std::min(500.0, 1000.0 * graceSeconds()) &&
        ending_.compare_exchange_strong(running, kOtherFailed)) {
      sendNote(kQuit, quitCode, "");
      quitSince = hostNowMs();
    }
    // Quitting: once the failed rank printed its line (or after the grace twice over, when it cannot).
    if (ending_ == kOtherFailed && (anyDone || hostNowMs() - quitSince > 2000.0 * graceSeconds())) {
      flushNotes(0.5);
      exitProcess(quitCode, false);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  MPI_Cancel(&inboxRequest_);
  MPI_Wait(&inboxRequest_, MPI_STATUS_IGNORE);
}

void MpiEnvironment::endJob(int code, const std::string& message, const std::function<std::string(bool)>& line) {
  if (!listener_.joinable()) {
    if (line) std::fprintf(stderr, "%s\n", line(false).c_str());
    gLive = nullptr;
    abortAll(code);
  }
  int running = kRunning;
  if (!ending_.compare_exchange_strong(running, kThisFailed)) {
    // Another thread of this process is ending it already (a failure here, or another rank's).
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  {
    std::lock_guard<std::mutex> lock(notesMutex_);
    heard_[rank_].kind = kFailed;
    heard_[rank_].message = message.substr(0, Note{}.text.size() - 1);
  }
  sendNote(kFailed, code, message);
  // Every live rank answers within the listener's period; a stopped one never does (nor is it waited for
  // again when the census found it silent).
  const auto everyone = [this] {
    for (int r = 0; r < world_; ++r) {
      if (heard_[r].kind == 0 && !(r < static_cast<int>(censusSilent_.size()) && censusSilent_[r])) return false;
    }
    return true;
  };
  waitForNotes(graceSeconds(), everyone);
  int printer = -1;
  bool alike = !message.empty(), silent = false;
  {
    std::lock_guard<std::mutex> lock(notesMutex_);
    for (int r = 0; r < world_; ++r) {
      if (heard_[r].kind == kFailed && printer < 0) printer = r;
      alike = alike && heard_[r].kind == kFailed && heard_[r].message == heard_[rank_].message;
      silent = silent || heard_[r].kind == 0;
    }
  }
  if (printer == rank_) {
    if (line) {
      std::fprintf(stderr, "%s\n", line(alike).c_str());
      std::fflush(stderr);
    }
    sendNote(kDone, code, "");
  } else {
    waitForNotes(2 * graceSeconds(), [this, printer] { return heard_[printer].done; });
  }
  flushNotes(0.5);
  exitProcess(code, silent);
}

void MpiEnvironment::exitProcess(int code, bool silentRanks) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (silentRanks) {
    // mpirun ends the ranks that did not answer when this process exits non-zero, unless told not to.
    const char* abortOnExit = std::getenv("OMPI_MCA_orte_abort_on_non_zero_status");
    const bool mpirunEnds = detectLauncher().launcher == "openmpi" && code != 0 &&
                            !(abortOnExit && (std::string(abortOnExit) == "0" || std::string(abortOnExit) == "false"));
    if (!mpirunEnds) MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

void MpiEnvironment::abortAll(int code) {
  if (MpiEnvironment* live = gLive.load()) live->endJob(code, "", nullptr);
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
