#include "train/trace.h"

#include <algorithm>
#include <cstdio>

#include "base/check.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/io/atomic_file.h"

namespace minidp::runtime {

// nlohmann's conversions, found by argument-dependent lookup.
void to_json(nlohmann::json& j, const Span& s) { j = {s.name, s.startMs, s.endMs}; }
void from_json(const nlohmann::json& j, Span& s) {
  s.name = j.at(0).get<std::string>();
  s.startMs = j.at(1).get<double>();
  s.endMs = j.at(2).get<double>();
}
void to_json(nlohmann::json& j, const BucketSpan& b) {
  j = {{"bucket", b.bucket},      {"bytes", b.bytes},      {"ready_ms", b.readyMs},
       {"launch_ms", b.launchMs}, {"start_ms", b.startMs}, {"end_ms", b.endMs}};
}
void from_json(const nlohmann::json& j, BucketSpan& b) {
  b.bucket = j.at("bucket").get<int>();
  b.bytes = j.at("bytes").get<size_t>();
  b.readyMs = j.at("ready_ms").get<double>();
  b.launchMs = j.at("launch_ms").get<double>();
  b.startMs = j.at("start_ms").get<double>();
  b.endMs = j.at("end_ms").get<double>();
}
void to_json(nlohmann::json& j, const StepRecord& r) {
  j = {{"step", r.step},     {"label", r.label},   {"step_ms", r.stepMs}, {"phases", r.phases},
       {"layers", r.layers}, {"copies", r.copies}, {"buckets", r.buckets}};
}
void from_json(const nlohmann::json& j, StepRecord& r) {
  r.step = j.at("step").get<int64_t>();
  r.label = j.at("label").get<std::string>();
  r.stepMs = j.at("step_ms").get<double>();
  r.phases = j.at("phases").get<std::vector<Span>>();
  r.layers = j.at("layers").get<std::vector<Span>>();
  r.copies = j.at("copies").get<std::vector<Span>>();
  r.buckets = j.at("buckets").get<std::vector<BucketSpan>>();
}

}  // namespace minidp::runtime

namespace minidp::train {

using runtime::StepRecord;

namespace {

enum Track { kCompute = 0, kComm = 1, kCopy = 2 };
const char* const kTrackNames[] = {"compute", "comm", "copy"};

// The latest end of any span of `r` (copies may end after the step's end mark).
double extentMs(const StepRecord& r) {
  double end = r.stepMs;
  for (const auto& s : r.copies) end = std::max(end, s.endMs);
  for (const auto& b : r.buckets) end = std::max(end, b.endMs);
  return end;
}

nlohmann::json completeEvent(const std::string& name, int rank, Track track, double originMs, double startMs,
                             double endMs, nlohmann::json args) {
  return {{"name", name},
          {"cat", kTrackNames[track]},
          {"ph", "X"},
          {"pid", rank},
          {"tid", static_cast<int>(track)},
          {"ts", (originMs + startMs) * 1e3},
          {"dur", std::max(0.0, endMs - startMs) * 1e3},
          {"args", std::move(args)}};
}

nlohmann::json metadata(const char* what, int rank, int tid, const nlohmann::json& args) {
  nlohmann::json e = {{"name", what}, {"ph", "M"}, {"pid", rank}, {"args", args}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

}  // namespace

nlohmann::json stepsToJson(const std::vector<StepRecord>& steps) { return steps; }

std::vector<StepRecord> stepsFromJson(const nlohmann::json& json) { return json.get<std::vector<StepRecord>>(); }

std::vector<std::vector<StepRecord>> gatherSteps(distributed::Communicator& comm,
                                                 const std::vector<StepRecord>& steps) {
  std::vector<std::vector<StepRecord>> ranks;
  const distributed::ExchangeLabel label("trace gather");
  for (const std::string& text : comm.allGather(stepsToJson(steps).dump())) {
    ranks.push_back(stepsFromJson(nlohmann::json::parse(text)));
  }
  return ranks;
}

nlohmann::json chromeTrace(const std::vector<std::vector<StepRecord>>& ranks, const nlohmann::json& about) {
  nlohmann::json events = nlohmann::json::array();
  size_t slots = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int rank = static_cast<int>(r);
    events.push_back(metadata("process_name", rank, -1, {{"name", "rank " + std::to_string(rank)}}));
    events.push_back(metadata("process_sort_index", rank, -1, {{"sort_index", rank}}));
    for (int t : {kCompute, kComm, kCopy}) {
      events.push_back(metadata("thread_name", rank, t, {{"name", kTrackNames[t]}}));
      events.push_back(metadata("thread_sort_index", rank, t, {{"sort_index", t}}));
    }
    slots = std::max(slots, ranks[r].size());
  }
  double originMs = 0;
  for (size_t k = 0; k < slots; ++k) {
    double slotMs = 0;
    for (const auto& steps : ranks) {
      if (k < steps.size()) slotMs = std::max(slotMs, extentMs(steps[k]));
    }
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (k >= ranks[r].size()) continue;
      const StepRecord& s = ranks[r][k];
      const int rank = static_cast<int>(r);
      const nlohmann::json tag = {{"step", s.step}};
      const std::string title = "step " + std::to_string(s.step) + (s.label.empty() ? "" : " (" + s.label + ")");
      events.push_back(completeEvent(title, rank, kCompute, originMs, 0, s.stepMs,
                                     {{"step", s.step},
                                      {"label", s.label},
                                      {"step_ms", s.stepMs},
                                      {"comm_ms", s.commMs()},
                                      {"exposed_comm_ms", s.exposedMs()},
                                      {"overlapped_share", s.overlappedShare()}}));
      for (const auto& p : s.phases)
        events.push_back(completeEvent(p.name, rank, kCompute, originMs, p.startMs, p.endMs, tag));
      for (const auto& l : s.layers) {
        const std::string layer = std::string(runtime::phaseName(runtime::Phase::Backward)) + " " + l.name;
        events.push_back(completeEvent(layer, rank, kCompute, originMs, l.startMs, l.endMs,
                                       {{"step", s.step}, {"derived_from", "grad-ready hooks"}}));
      }
      for (const auto& c : s.copies)
        events.push_back(completeEvent(c.name, rank, kCopy, originMs, c.startMs, c.endMs, tag));
      for (const auto& b : s.buckets) {
        events.push_back(completeEvent("all-reduce bucket " + std::to_string(b.bucket), rank, kComm, originMs,
                                       b.startMs, b.endMs,
                                       {{"step", s.step},
                                        {"bucket", b.bucket},
                                        {"bytes", b.bytes},
                                        {"host_ready_ms", b.readyMs},
                                        {"host_launch_ms", b.launchMs}}));
      }
    }
    originMs += slotMs * 1.1;  // a gap between the slots of consecutive traced steps
  }
  nlohmann::json other = about;
  other["layout"] = "steps side by side; times relative to each step's start mark on its rank (rank-relative)";
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
}

void writeTrace(distributed::Communicator& comm, const std::vector<StepRecord>& steps, const std::string& path,
                const nlohmann::json& about) {
  auto ranks = gatherSteps(comm, steps);
  if (comm.name() == "emulated") ranks.resize(1);  // its other ranks are copies that do not exist
  if (comm.rank() == 0) writeFileAtomically(path, chromeTrace(ranks, about).dump());
}

}  // namespace minidp::train
