// Step timing and the trace, end to end on the CPU under mpirun: the Trainer's timer resolves every
// step into contiguous phases, hook-derived backward layers and bucket all-reduce spans; the Chrome
// trace gathered to rank 0 has a compute and a comm track per rank; with overlap on an all-reduce
// starts inside backward, with overlap off every all-reduce starts after it. On an emulated slow link
// (each rank alone), overlap off exposes all of the communication and overlap on hides part of it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "framework/distributed/comm/backends/emulated_communicator.h"
#include "tests/distributed/dist_test_env.h"
#include "train/trace.h"
#include "train/trainer.h"

namespace minidp {
namespace {

using runtime::StepRecord;

constexpr int64_t kWarmup = 2, kTraced = 2;

// A small GPT on fortunes with ~20 KB buckets, so that its gradients spread over many buckets.
train::Options tinyGpt(bool overlap) {
  train::Options o;
  o.model = "gpt";
  o.modelFlags.set("layers", 3);
  o.modelFlags.set("embd", 48);
  o.modelFlags.set("heads", 4);
  o.modelFlags.set("context", 32);
  o.batchSize = 8;
  o.ddp.bucketCapBytes = o.ddp.firstBucketCapBytes = distributed::mibToBytes(0.02);
  o.ddp.overlap = overlap ? distributed::Overlap::DuringBackward : distributed::Overlap::AfterBackward;
  return o;
}

struct TimedRun {
  std::vector<StepRecord> traced;  // the detailed steps after the warm-up
  size_t buckets = 0;              // of the bucket plan
};

// Runs kWarmup + kTraced steps.
TimedRun runSteps(const train::Options& opts, train::Session& session) {
  train::Trainer trainer(opts, session);
  TimedRun run;
  run.buckets = trainer.ddp().plan().buckets.size();
  for (int64_t i = 1; i <= kWarmup + kTraced; ++i) {
    trainer.timer().setDetailed(i > kWarmup);
    trainer.step();
    for (StepRecord& r : trainer.timer().collect(true)) {
      if (r.step > kWarmup) run.traced.push_back(std::move(r));
    }
  }
  return run;
}

// On a loaded 2-core machine a thread may wait this long to be scheduled after it was woken.
constexpr double kWakeMs = 25;

runtime::Span phaseOf(const StepRecord& r, const std::string& name) {
  for (const auto& p : r.phases) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no phase " << name;
  return {};
}

// What must hold for any step: phases contiguous in order, layers inside backward, numbers consistent.
void checkRecord(const StepRecord& r, size_t buckets) {
  const std::vector<std::string> order = {"forward", "backward", "prefetch", "finalize", "optimizer"};
  ASSERT_EQ(r.phases.size(), order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(r.phases[i].name, order[i]);
    EXPECT_LE(r.phases[i].startMs, r.phases[i].endMs);
    if (i > 0) EXPECT_EQ(r.phases[i].startMs, r.phases[i - 1].endMs);
  }
  EXPECT_EQ(r.phases.front().startMs, 0.0);
  EXPECT_EQ(r.stepMs, r.phases.back().endMs);
  // Every block of the GPT is a layer of its own; the spans tile backward from its start.
  std::set<std::string> names;
  for (const auto& l : r.layers) names.insert(l.name);
  for (const char* layer : {"h.0", "h.1", "h.2", "ln_f", "lm_head", "wte", "wpe"})
    EXPECT_EQ(names.count(layer), 1u) << layer;
  ASSERT_FALSE(r.layers.empty());
  EXPECT_EQ(r.layers.front().startMs, r.phases[1].startMs);
  for (size_t i = 1; i < r.layers.size(); ++i) EXPECT_EQ(r.layers[i].startMs, r.layers[i - 1].endMs);
  EXPECT_LE(r.layers.back().endMs, r.phases[1].endMs);
  ASSERT_EQ(r.buckets.size(), buckets);
  for (const auto& b : r.buckets) {
    EXPECT_LE(b.launchMs, b.startMs + 1e-9) << "bucket " << b.bucket << " ran before it was launched";
    EXPECT_LE(b.startMs, b.endMs);
  }
  const double comm = r.commMs(), exposed = r.exposedMs();
  EXPECT_GT(comm, 0);
  // The wait (host clock, as the comm thread's) ends once the last all-reduce did, and soon after it.
  const runtime::Span wait = phaseOf(r, "finalize");
  double lastEnd = 0;
  for (const auto& b : r.buckets) lastEnd = std::max(lastEnd, b.endMs);
  EXPECT_GE(wait.endMs, lastEnd);
  EXPECT_LE(wait.endMs, std::max(lastEnd, wait.startMs) + kWakeMs);
  // Beyond the all-reduce time, exposed holds only the comm thread's hand-offs and the wake-up.
  EXPECT_LE(exposed, comm + kWakeMs);
  EXPECT_GE(r.overlappedShare(), 0);
  EXPECT_LE(r.overlappedShare(), 1);
  EXPECT_DOUBLE_EQ(r.computeMs(), r.stepMs - exposed);
}

std::string tracePath(bool overlap) {
  return ::testing::TempDir() + "minidp_trace_" + std::to_string(getpid()) + (overlap ? "_on" : "_off") + ".json";
}

class StepTimingTest : public ::testing::TestWithParam<bool> {};

TEST_P(StepTimingTest, TraceShowsWhereAllReducesRun) {
  const bool overlap = GetParam();
  std::string reason;
  train::Session session;
  session.comm = testing::sharedCommunicator(Device::CPU, &reason);
  if (!session.comm) GTEST_SKIP() << reason;
  if (session.world() < 2) GTEST_SKIP() << "needs mpirun with 2 or more ranks";
  const TimedRun run = runSteps(tinyGpt(overlap), session);
  const std::vector<StepRecord>& steps = run.traced;
  const size_t buckets = run.buckets;
  ASSERT_EQ(steps.size(), static_cast<size_t>(kTraced));
  ASSERT_GE(buckets, 4u);
  for (const StepRecord& r : steps) checkRecord(r, buckets);

  const std::string path = tracePath(overlap);
  train::writeTrace(*session.comm, steps, path, {{"test", "step timing"}});
  if (session.rank() != 0) return;
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json trace = nlohmann::json::parse(in);  // throws on invalid JSON
  std::remove(path.c_str());
  ASSERT_TRUE(trace.contains("traceEvents"));
  // Per rank and step: where backward ends, where its last layer ends, when each all-reduce starts (us).
  struct StepSpans {
    double backwardEnd = -1, lastLayerEnd = -1;
    std::vector<double> allReduceStarts;
  };
  std::map<std::pair<int, int64_t>, StepSpans> spans;
  std::set<std::pair<int, int>> tracks;
  std::set<std::string> processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    const int pid = e["pid"].get<int>();
    tracks.emplace(pid, e["tid"].get<int>());
    const std::string name = e["name"].get<std::string>();
    StepSpans& s = spans[{pid, e["args"]["step"].get<int64_t>()}];
    const double start = e["ts"].get<double>(), end = start + e["dur"].get<double>();
    if (name == "backward") s.backwardEnd = end;
    if (name.rfind("backward ", 0) == 0) s.lastLayerEnd = std::max(s.lastLayerEnd, end);
    if (name.rfind("all-reduce bucket ", 0) == 0) s.allReduceStarts.push_back(start);
  }
  for (int r = 0; r < session.world(); ++r) {
    EXPECT_EQ(processes.count("rank " + std::to_string(r)), 1u) << "rank " << r;
    EXPECT_EQ(tracks.count({r, 0}), 1u) << "no compute track for rank " << r;
    EXPECT_EQ(tracks.count({r, 1}), 1u) << "no comm track for rank " << r;
  }
  EXPECT_EQ(spans.size(), static_cast<size_t>(session.world() * kTraced));
  for (const auto& [key, s] : spans) {
    ASSERT_EQ(s.allReduceStarts.size(), buckets);
    ASSERT_GT(s.backwardEnd, 0);
    ASSERT_GT(s.lastLayerEnd, 0);
    const double first = *std::min_element(s.allReduceStarts.begin(), s.allReduceStarts.end());
    if (overlap) {
      EXPECT_LT(first, s.lastLayerEnd) << "rank " << key.first << " step " << key.second
                                       << ": no all-reduce overlaps backward";
    } else {
      EXPECT_GE(first, s.backwardEnd) << "rank " << key.first << " step " << key.second
                                      << ": an all-reduce started during backward";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Overlap, StepTimingTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

// Each rank alone on an emulated link slow enough that the all-reduces take about as long as backward.
TEST(StepTimingEmulated, OverlapHidesPartOfTheCommunication) {
  double exposed[2] = {0, 0};
  for (bool overlap : {false, true}) {
    train::Session session;
    session.comm = std::make_shared<distributed::EmulatedCommunicator>(8, 0.02, 10, false, 0, true);
    const TimedRun run = runSteps(tinyGpt(overlap), session);
    ASSERT_EQ(run.traced.size(), static_cast<size_t>(kTraced));
    for (const StepRecord& r : run.traced) {
      checkRecord(r, run.buckets);
      exposed[overlap] += r.exposedMs();
      const double comm = r.commMs();
      if (overlap) {
        EXPECT_GT(r.overlappedShare(), 0) << "step " << r.step;
        continue;
      }
      // Overlap off: the link runs only after backward, and what it did not do while the host was still
      // launching buckets, the host waited for.
      double firstLaunch = r.stepMs;
      for (const auto& b : r.buckets) {
        EXPECT_GE(b.startMs, phaseOf(r, "backward").endMs);
        firstLaunch = std::min(firstLaunch, b.launchMs);
      }
      EXPECT_LE(comm, r.exposedMs() + (phaseOf(r, "finalize").startMs - firstLaunch) + 1e-6) << "step " << r.step;
    }
  }
  EXPECT_LT(exposed[1], exposed[0]);
}

// The automatic bucket cap (bucketCapBytes 0) on the CPU ranks (in a CUDA build without a GPU too: timing the link must not synchronise
// a GPU that is not there): the first step's profile picks a cap that every rank takes alike, also with
// --sparse-embedding-grad (whose bucket the model costs at its rows).
TEST(StepTiming, AutoBucketCapOnTheCpuRanks) {
  std::string reason;
  train::Session session;
  session.comm = testing::sharedCommunicator(Device::CPU, &reason);
  if (!session.comm) GTEST_SKIP() << reason;
  if (session.world() < 2) GTEST_SKIP() << "needs mpirun with 2 or more ranks";
  // The row-sparse bucket costs its rows; PowerSGD's buckets cost their factors (compressed from the first
  // step: the model weighs the steady state).
  for (const auto& [sparse, hook] : {std::pair{false, "allreduce"}, {true, "allreduce"}, {false, "powersgd"}}) {
    train::Options o = tinyGpt(true);
    o.ddp.bucketCapBytes = 0;
    o.sparseEmbeddingGrad = sparse;
    o.ddp.commHook.name = hook;
    if (std::string(hook) == "powersgd") o.ddp.commHook.flags.set("powersgd-start-iter", 0);
    train::Trainer trainer(o, session);
    trainer.step();
    trainer.step();
    const size_t cap = trainer.ddp().bucketCapBytes();
    EXPECT_GE(cap, distributed::mibToBytes(1)) << "sparse " << sparse << ", " << hook;
    const std::string mine = std::to_string(cap) + " " + std::to_string(trainer.ddp().plan().buckets.size());
    for (const std::string& theirs : session.comm->allGather(mine)) {
      EXPECT_EQ(theirs, mine) << "sparse " << sparse << ", " << hook;
    }
  }
}

TEST(StepTiming, LayerOfGroupsByModulePrefix) {
  EXPECT_EQ(runtime::layerOf("h.3.attn.c_attn.weight"), "h.3");
  EXPECT_EQ(runtime::layerOf("layers.1.bias"), "layers.1");
  EXPECT_EQ(runtime::layerOf("ln_f.weight"), "ln_f");
  EXPECT_EQ(runtime::layerOf("h.x1.weight"), "h");
  EXPECT_EQ(runtime::layerOf("scale"), "scale");
}

TEST(StepTiming, CommIsTheUnionOfBucketSpans) {
  StepRecord r;
  r.buckets = {{0, 4, 0, 0, 1.0, 3.0}, {1, 4, 0, 0, 2.0, 4.0}, {2, 4, 0, 0, 6.0, 7.0}};  // [1,4] and [6,7]
  r.phases = {{"backward", 0.0, 5.0}, {"finalize", 5.0, 6.0}, {"optimizer", 6.0, 8.0}};
  r.stepMs = 8.0;
  EXPECT_DOUBLE_EQ(r.commMs(), 4.0);
  EXPECT_DOUBLE_EQ(r.exposedMs(), 1.0);
  EXPECT_DOUBLE_EQ(r.overlappedShare(), 0.75);
  EXPECT_DOUBLE_EQ(r.computeMs(), 7.0);
  StepRecord none;
  EXPECT_EQ(none.overlappedShare(), 0.0);
}

}  // namespace
}  // namespace minidp
