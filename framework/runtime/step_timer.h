// StepTimer: where the time of a training step goes, measured without stalling the step. Marks are
// CUDA events on the compute stream (from a pool the timer reuses) or host times on the CPU backend;
// a step is resolved into milliseconds only once its work is complete (a non-blocking query at the next
// step, or a caller that has synchronised), so timing adds no host synchronisation.
//
// Phases of a step (contiguous on the compute track, the Phase enum): forward, backward, prefetch,
// finalize, optimizer; a --cuda-graph step has one, replay. "finalize" spans exactly the compute
// stream's wait for the gradient all-reduces (CUDA: an event just before the stream-waits on the
// buckets' events and one right after, nothing else queued in between; CPU: the host's wait), so its
// length is the EXPOSED communication.
//
// Per-layer backward spans are derived from grad-ready hooks, not from the ops: each hook records a
// mark; parameters are grouped by module prefix ("h.3" for "h.3.attn.c_attn.weight", "layers.1",
// "ln_f"); a layer's span ends at its last parameter's mark and starts where the previous one ended.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/stream.h"
#include "framework/runtime/clock.h"
#include "framework/runtime/nvtx.h"

namespace minidp::runtime {

/// The phases of a step on the compute track, in step order (Replay: a whole --cuda-graph step).
enum class Phase { Forward, Backward, Prefetch, Finalize, Optimizer, Replay };
/// The phase's name in step records, traces and NVTX ranges ("forward", ..., "replay"): the one table
/// of these names (tools/plot_bench.py colours the trace's phases by them).
const char* phaseName(Phase phase);

/// A named interval of a step, in ms after the step's start mark.
struct Span {
  std::string name;
  double startMs = 0;
  double endMs = 0;
  double ms() const { return endMs - startMs; }
};

/// One bucket's all-reduce in a step. ready/launch: host ms after the host opened the step (the hook
/// fired / the collective was issued). start/end: the collective itself, ms after the step's start
/// mark (CUDA: comm-stream events; CPU: the comm thread's clock).
struct BucketSpan {
  int bucket = 0;
  size_t bytes = 0;
  double readyMs = 0;
  double launchMs = 0;
  double startMs = 0;
  double endMs = 0;
};

/// Everything measured in one step.
struct StepRecord {
  int64_t step = 0;                 // 1-based count of the timer's steps
  std::string label;                // free text of the caller (e.g. the benchmark's configuration)
  double stepMs = 0;                // start mark to end mark
  std::vector<Span> phases;         // compute track, contiguous, in order
  std::vector<Span> layers;         // backward per layer (hook-derived; detailed steps only)
  std::vector<Span> copies;         // copy track: batch host-to-device copies (detailed CUDA steps)
  std::vector<BucketSpan> buckets;  // comm track
  /// Time during which at least one bucket all-reduce ran (the union of their spans).
  double commMs() const;
  /// Sum of the Finalize phases: how long compute waited for communication.
  double exposedMs() const;
  /// Step time minus exposed communication.
  double computeMs() const { return stepMs - exposedMs(); }
  /// 1 - exposed / comm, clamped to [0, 1]; 0 when there was no communication.
  double overlappedShare() const;
  /// The summed length of the `phase` phases.
  double phaseMs(Phase phase) const;
};

/// The module prefix a parameter's backward span is grouped under: the first dotted component, plus
/// the second when it is an index ("h.3.attn.c_attn.weight" -> "h.3", "ln_f.weight" -> "ln_f").
std::string layerOf(const std::string& parameterName);

/// Marks phases of training steps on the compute stream (or the host clock) and resolves them later.
class StepTimer {
 public:
  explicit StepTimer(Device device);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  /// Parameter names in registration order: markGradReady's indices, grouped into layers.
  void setParameterNames(std::vector<std::string> names) { parameterNames_ = std::move(names); }
  /// Detailed steps also record per-parameter grad-ready marks and batch copies (for the trace).
  void setDetailed(bool detailed) { detailed_ = detailed; }
  bool detailed() const { return detailed_; }

  /// Opens a step and its first phase at the step's start mark (the reference of every span). Also
  /// resolves, without blocking, the earlier steps whose work has completed.
  void beginStep(Phase firstPhase);
  /// Whether a step is open (between beginStep and endStep).
  bool isOpen() const { return open_; }
  /// Closes the running phase at a new mark and opens `next` there (with an NVTX range).
  void phase(Phase next);
  /// Parameter `index`'s gradient is enqueued (its grad-ready hook fired). Detailed steps only.
  void markGradReady(size_t index);
  /// Opens / closes a copy-track span around work enqueued on `stream` (CUDA; ignored on the CPU and
  /// outside detailed steps).
  void beginCopy(cudaStream_t stream);
  void endCopy(cudaStream_t stream, const char* name);
  /// Host ms (runtime::hostNowMs) at which the open step began.
  double hostStartMs() const;
  /// The open step's start event (CUDA), the reference for Work::timing; null on the CPU.
  cudaEvent_t startEvent() const;
  /// Runs `fill` on the open step's record once the step's work has completed (e.g. to add the
  /// buckets' spans, whose device timings are readable only then).
  void atResolve(std::function<void(StepRecord&)> fill);
  /// Closes the running phase and the step at the end mark.
  void endStep();
  /// The closed steps resolved so far, in order, handed over once. `wait`: first blocks until every
  /// closed step's work completed (a host synchronisation: log points and per-step benchmarks only).
  std::vector<StepRecord> collect(bool wait);
  /// The resolved steps not collected yet, left in place for collect() (the trainer's own look at its
  /// first step, DDP's automatic bucket cap). `wait` as for collect.
  const std::vector<StepRecord>& peek(bool wait);

 private:
  struct Mark {
    cudaEvent_t event = nullptr;  // CUDA: on the stream that did the work
    double hostMs = 0;
  };
  struct MarkedSpan {
    std::string name;
    size_t start = 0, end = 0;  // indices into marks
  };
  struct Pending {
    int64_t step = 0;
    std::vector<Mark> marks;  // marks[0]: the start mark
    std::vector<MarkedSpan> phases, copies;
    std::vector<std::pair<size_t, size_t>> ready;  // (parameter, mark)
    size_t layerStart = 0;                         // mark where the first layer span starts
    size_t copyStart = 0;                          // mark of the open copy
    std::vector<std::function<void(StepRecord&)>> fills;
  };
  size_t mark(cudaStream_t stream);
  void closePhase();
  bool complete(const Pending& p, bool wait) const;
  void collectCompleted(bool wait);
  StepRecord resolve(Pending& p);
  double ms(const Pending& p, size_t mark) const;

  Device device_;
  bool detailed_ = false;
  bool open_ = false;
  int64_t steps_ = 0;
  std::vector<std::string> parameterNames_;
  Pending current_;
  Phase phase_ = Phase::Forward;  // the running phase
  size_t phaseStart_ = 0;
  std::deque<Pending> closed_;
  std::vector<StepRecord> resolved_;
  std::vector<cudaEvent_t> pool_;  // free events, reused
};

}  // namespace minidp::runtime
