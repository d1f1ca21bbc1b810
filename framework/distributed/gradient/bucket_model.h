// The bucket cap from measured costs (--bucket-mb auto). A collective of b bytes is modelled as
// alpha + beta * b: alpha (latency) and beta (time per byte) fitted to all-reduces of two sizes timed at
// start-up. Backward is the first step's: when each parameter's gradient became final (the step timer's
// per-layer spans). A plan's buckets then run one after another in index order, each from the moment its
// last gradient is ready or the previous one ended, whichever is later; the exposed time is how long the
// last one ends after backward. Small caps pay alpha per bucket, large caps start late; the cap with the
// least modelled exposed time wins.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "framework/distributed/gradient/bucket_plan.h"
#include "framework/distributed/gradient/comm_hook.h"
#include "framework/distributed/comm/communicator.h"
#include "framework/runtime/step_timer.h"

namespace minidp::distributed {

/// alpha + beta * bytes, in ms.
struct LinkCost {
  double alphaMs = 0;
  double msPerByte = 0;
  double ms(double bytes) const { return alphaMs + msPerByte * bytes; }
  /// "alpha 0.020 ms, 25.3 GB/s".
  std::string describe() const;
};

/// The straight line through (bytes, ms) samples (least squares; at least two distinct sizes). A negative
/// intercept (noise) becomes 0.
LinkCost fitLinkCost(const std::vector<std::pair<double, double>>& samples);

/// Times `repeats` all-reduces (after one warm-up) of `smallBytes` and of `largeBytes` of float32 on
/// `device` over `comm`, synchronising around each, and fits the cost. A collective: every rank calls it.
LinkCost measureLinkCost(Communicator& comm, Device device, size_t smallBytes, size_t largeBytes, int repeats);

/// When each parameter's gradient was final, in ms after backward began (registration order), and when
/// backward ended.
struct BackwardProfile {
  std::vector<double> readyMs;
  double endMs = 0;
};

/// The backward profile of a detailed step (runtime/step_timer.h): parameter i (named names[i]) is ready
/// at the end of the last layer span named layerOf(names[i]); one without a span at backward's end.
BackwardProfile profileFromStep(const runtime::StepRecord& step, const std::vector<std::string>& names);

/// What one bucket of a plan puts on the link (the hook's CommHook::wireCost of its gradients).
using BucketWire = std::function<WireCost(const Bucket&)>;

/// One collective of the bucket's bytes (all-reduce as it is).
WireCost wholeBucket(const Bucket& bucket);

/// The modelled exposed communication of `plan`, each bucket costing collectives x alpha + bytes x beta
/// (`wire`; empty: wholeBucket).
double modelledExposedMs(const BucketPlan& plan, const BackwardProfile& profile, const LinkCost& link,
                         const BucketWire& wire = {});

/// A cap and its modelled exposed time.
struct CapChoice {
  size_t capBytes = 0;
  double exposedMs = 0;
};

/// Models each cap of `candidates` (bytes; first-bucket cap min(firstCapBytes, cap)); returns every candidate in
/// order, and in `best` the index of the least exposed (the larger cap on a tie: fewer collectives).
std::vector<CapChoice> modelCaps(const std::vector<ParamInfo>& params, const BackwardProfile& profile,
                                 const LinkCost& link, const std::vector<size_t>& candidates, size_t firstCapBytes,
                                 const BucketWire& wire, size_t& best);

/// --bucket-mb auto after the first step: models the caps 1 to 400 MB (and one bucket for all) on this
/// rank's profile and returns rank 0's choice on every rank (a collective), so the plans stay identical.
/// `report` (rank 0's, for printing): the link, backward and each cap's modelled exposed time. Returns bytes.
size_t chooseBucketCap(Communicator& comm, const std::vector<ParamInfo>& params, const BackwardProfile& profile,
                       const LinkCost& link, size_t firstCapBytes, const BucketWire& wire, std::string& report);

class Reducer;

/// --bucket-mb auto (DdpOptions::bucketCapBytes 0), owned by DistributedDataParallel: the link measured at
/// construction, the first step timed in detail (per-layer backward spans), the cap chosen from it, each bucket
/// costed at what its comm hook puts on the link.
class AutoBucketCap {
 public:
  /// Times all-reduces of 256 KiB and 32 MiB on `device` (a collective: every rank constructs it).
  AutoBucketCap(Communicator& comm, Device device);
  /// Before the profiled step's backward: per-layer spans for the model (the timer's setting is kept for later).
  void beginProfile(runtime::StepTimer& timer);
  /// After the profiled step closed (its record resolved; synchronises): rank 0's cap for every rank (a
  /// collective), and in `report` the link, backward and each cap's modelled exposed time. Restores the timer.
  size_t choose(runtime::StepTimer& timer, const Reducer& reducer, const std::vector<ParamInfo>& params,
                const std::vector<Shape>& shapes, int rowBucket, size_t firstCapBytes, std::string& report);

 private:
  Communicator& comm_;
  LinkCost link_;
  bool timerDetailed_ = false;
};

}  // namespace minidp::distributed
