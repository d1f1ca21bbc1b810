#include "framework/runtime/step_timer.h"

#include "base/check.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "framework/runtime/device.h"

#if MINIDP_WITH_CUDA
#include <nvtx3/nvToolsExt.h>

#include "base/cuda_check.h"
#endif

namespace minidp::runtime {

namespace {}  // namespace

double StepRecord::commMs() const {
  std::vector<std::pair<double, double>> spans;
  for (const BucketSpan& b : buckets) spans.emplace_back(b.startMs, b.endMs);
  std::sort(spans.begin(), spans.end());
  double total = 0, coveredTo = -1e300;
  for (const auto& [start, end] : spans) {
    const double from = std::max(start, coveredTo);
    if (end > from) total += end - from;
    coveredTo = std::max(coveredTo, end);
  }
  return total;
}

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Prefetch: return "prefetch";
    case Phase::Finalize: return "finalize";
    case Phase::Optimizer: return "optimizer";
    case Phase::Replay: return "replay";
  }
  throwError("unknown step phase " + std::to_string(static_cast<int>(phase)), __FILE__, __LINE__);
}

double StepRecord::phaseMs(Phase phase) const {
  const char* name = phaseName(phase);
  double total = 0;
  for (const Span& s : phases) {
    if (s.name == name) total += s.ms();
  }
  return total;
}

double StepRecord::exposedMs() const { return phaseMs(Phase::Finalize); }

double StepRecord::overlappedShare() const {
  const double comm = commMs();
  if (comm <= 0) return 0;
  return std::clamp(1.0 - exposedMs() / comm, 0.0, 1.0);
}

std::string layerOf(const std::string& parameterName) {
  const size_t first = parameterName.find('.');
  if (first == std::string::npos) return parameterName;
  const size_t second = parameterName.find('.', first + 1);
  const std::string next =
      parameterName.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  const bool index =
      !next.empty() && std::all_of(next.begin(), next.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  return index ? parameterName.substr(0, second) : parameterName.substr(0, first);
}

StepTimer::StepTimer(Device device) : device_(device) {}

StepTimer::~StepTimer() {
#if MINIDP_WITH_CUDA
  // Destroying an event whose work is pending is allowed: CUDA releases it once it completes.
  std::vector<cudaEvent_t> events = pool_;
  for (const Mark& m : current_.marks) events.push_back(m.event);
  for (const Pending& p : closed_) {
    for (const Mark& m : p.marks) events.push_back(m.event);
  }
  for (cudaEvent_t e : events) {
    if (e) cudaEventDestroy(e);
  }
#endif
}

size_t StepTimer::mark(cudaStream_t stream) {
  Mark m;
  m.hostMs = hostNowMs();
#if MINIDP_WITH_CUDA
  if (device_ == Device::CUDA) {
    if (pool_.empty()) {
      CUDA_CHECK(cudaEventCreate(&m.event));  // grows to the steps in flight, then reused
    } else {
      m.event = pool_.back();
      pool_.pop_back();
    }
    CUDA_CHECK(cudaEventRecord(m.event, stream));
  }
#else
  (void)stream;
#endif
  current_.marks.push_back(m);
  return current_.marks.size() - 1;
}

void StepTimer::beginStep(Phase firstPhase) {
  MINIDP_CHECK(!open_, "beginStep() twice: call endStep() first");
  collectCompleted(false);
  current_ = Pending{};
  current_.step = ++steps_;
  open_ = true;
  phase_ = firstPhase;
  phaseStart_ = mark(device_ == Device::CUDA ? computeStream() : nullptr);
#if MINIDP_WITH_CUDA
  nvtxRangePushA(phaseName(firstPhase));
#endif
}

void StepTimer::closePhase() {
  const size_t end = mark(device_ == Device::CUDA ? computeStream() : nullptr);
  current_.phases.push_back(MarkedSpan{phaseName(phase_), phaseStart_, end});
  phaseStart_ = end;
#if MINIDP_WITH_CUDA
  nvtxRangePop();
#endif
}

void StepTimer::phase(Phase next) {
  MINIDP_CHECK(open_, "phase('" << phaseName(next) << "') outside a step");
  closePhase();
  phase_ = next;
#if MINIDP_WITH_CUDA
  nvtxRangePushA(phaseName(next));
#endif
}

void StepTimer::markGradReady(size_t index) {
  if (!open_ || !detailed_) return;
  MINIDP_CHECK(index < parameterNames_.size(),
               "grad-ready mark of parameter " << index << " of " << parameterNames_.size() << " named");
  if (current_.ready.empty()) current_.layerStart = phaseStart_;
  current_.ready.emplace_back(index, mark(device_ == Device::CUDA ? computeStream() : nullptr));
}

void StepTimer::beginCopy(cudaStream_t stream) {
  if (!open_ || !detailed_ || device_ != Device::CUDA) return;
  current_.copyStart = mark(stream);
}

void StepTimer::endCopy(cudaStream_t stream, const char* name) {
  if (!open_ || !detailed_ || device_ != Device::CUDA) return;
  current_.copies.push_back(MarkedSpan{name, current_.copyStart, mark(stream)});
}

double StepTimer::hostStartMs() const {
  MINIDP_CHECK(open_, "hostStartMs() outside a step");
  return current_.marks.front().hostMs;
}

cudaEvent_t StepTimer::startEvent() const {
  MINIDP_CHECK(open_, "startEvent() outside a step");
  return current_.marks.front().event;
}

void StepTimer::atResolve(std::function<void(StepRecord&)> fill) {
  MINIDP_CHECK(open_, "atResolve() outside a step");
  current_.fills.push_back(std::move(fill));
}

void StepTimer::endStep() {
  MINIDP_CHECK(open_, "endStep() without beginStep()");
  closePhase();
  open_ = false;
  closed_.push_back(std::move(current_));
  current_ = Pending{};
}

bool StepTimer::complete(const Pending& p, bool wait) const {
#if MINIDP_WITH_CUDA
  for (const Mark& m : p.marks) {
    if (!m.event) continue;
    if (wait) {
      CUDA_CHECK(cudaEventSynchronize(m.event));
      continue;
    }
    const cudaError_t status = cudaEventQuery(m.event);
    if (status == cudaErrorNotReady) return false;
    CUDA_CHECK(status);
  }
#else
  (void)p;
  (void)wait;
#endif
  return true;
}

double StepTimer::ms(const Pending& p, size_t index) const {
  const Mark& m = p.marks.at(index);
#if MINIDP_WITH_CUDA
  if (m.event) {
    float elapsed = 0;
    CUDA_CHECK(cudaEventElapsedTime(&elapsed, p.marks.front().event, m.event));
    return elapsed;
  }
#endif
  return m.hostMs - p.marks.front().hostMs;
}

StepRecord StepTimer::resolve(Pending& p) {
  StepRecord r;
  r.step = p.step;
  const auto span = [&](const MarkedSpan& s) { return Span{s.name, ms(p, s.start), ms(p, s.end)}; };
  for (const MarkedSpan& s : p.phases) r.phases.push_back(span(s));
  for (const MarkedSpan& s : p.copies) r.copies.push_back(span(s));
  r.stepMs = r.phases.empty() ? 0 : r.phases.back().endMs;
  // Consecutive parameters of one module form its span; the next span starts where this one ended.
  double from = p.ready.empty() ? 0 : ms(p, p.layerStart);
  for (const auto& [param, markIndex] : p.ready) {
    const std::string layer = layerOf(parameterNames_[param]);
    const double at = ms(p, markIndex);
    if (!r.layers.empty() && r.layers.back().name == layer) {
      r.layers.back().endMs = at;
    } else {
      r.layers.push_back(Span{layer, from, at});
    }
    from = at;
  }
  for (auto& fill : p.fills) fill(r);
  for (Mark& m : p.marks) {
    if (m.event) pool_.push_back(m.event);
    m.event = nullptr;
  }
  return r;
}

void StepTimer::collectCompleted(bool wait) {
  while (!closed_.empty() && complete(closed_.front(), wait)) {
    resolved_.push_back(resolve(closed_.front()));
    closed_.pop_front();
  }
}

const std::vector<StepRecord>& StepTimer::peek(bool wait) {
  collectCompleted(wait);
  return resolved_;
}

std::vector<StepRecord> StepTimer::collect(bool wait) {
  collectCompleted(wait);
  std::vector<StepRecord> out = std::move(resolved_);
  resolved_.clear();
  return out;
}

}  // namespace minidp::runtime
