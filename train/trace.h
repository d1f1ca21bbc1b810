// Step records of every rank as one Chrome trace (chrome://tracing, https://ui.perfetto.dev): pid =
// rank, tracks (tid) compute / comm / copy. Steps are laid out side by side: the k-th traced step of
// every rank starts at the same time, k-th slot = the longest rank's k-th step plus a gap. So times
// are relative to each step's start mark on each rank (rank-relative, not a global clock); inside a
// step every span is exact (CUDA events, or the host clock on the CPU).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/distributed/comm/communicator.h"
#include "framework/runtime/step_timer.h"

namespace minidp::train {

/// One rank's step records as JSON (to gather them over the ranks).
nlohmann::json stepsToJson(const std::vector<runtime::StepRecord>& steps);
/// The records stepsToJson wrote.
std::vector<runtime::StepRecord> stepsFromJson(const nlohmann::json& json);

/// Every rank's `steps`, indexed by rank, on every rank. Collective.
std::vector<std::vector<runtime::StepRecord>> gatherSteps(distributed::Communicator& comm,
                                                          const std::vector<runtime::StepRecord>& steps);

/// The Chrome trace of `ranks` (indexed by rank): "traceEvents" of complete ("X") spans in us and
/// the metadata naming processes "rank r" and threads compute / comm / copy; `about` goes to "otherData".
nlohmann::json chromeTrace(const std::vector<std::vector<runtime::StepRecord>>& ranks, const nlohmann::json& about);

/// Gathers `steps` to rank 0, which writes their Chrome trace to `path`. Collective.
void writeTrace(distributed::Communicator& comm, const std::vector<runtime::StepRecord>& steps, const std::string& path,
                const nlohmann::json& about);

}  // namespace minidp::train
