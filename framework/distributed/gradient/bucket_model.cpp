#include "framework/distributed/gradient/bucket_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "framework/distributed/gradient/reducer.h"
#include "framework/runtime/device.h"

namespace minidp::distributed {

std::string LinkCost::describe() const {
  char text[96];
  std::snprintf(text, sizeof text, "alpha %.3f ms, %.2f GB/s", alphaMs, msPerByte > 0 ? 1e-6 / msPerByte : 0.0);
  return text;
}

LinkCost fitLinkCost(const std::vector<std::pair<double, double>>& samples) {
  MINIDP_CHECK(samples.size() >= 2, "a link cost needs at least two samples");
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : samples) {
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double denominator = n * sxx - sx * sx;
  MINIDP_CHECK(denominator > 0, "a link cost needs samples of at least two sizes");
  LinkCost cost;
  cost.msPerByte = std::max(0.0, (n * sxy - sx * sy) / denominator);
  cost.alphaMs = std::max(0.0, (sy - cost.msPerByte * sx) / n);
  return cost;
}

LinkCost measureLinkCost(Communicator& comm, Device device, size_t smallBytes, size_t largeBytes, int repeats) {
  std::vector<std::pair<double, double>> samples;
  for (size_t bytes : {smallBytes, largeBytes}) {
    Tensor buffer = Tensor::zeros({static_cast<int64_t>(bytes / sizeof(float))}, DType::F32, device);
    // CUDA: wait() orders the compute stream; synchronising brackets the collective on the host. CPU: wait()
    // blocks until the comm thread is done (and there may be no GPU to synchronise with).
    const auto synchronize = [device] {
      if (device == Device::CUDA) runtime::synchronize();
    };
    for (int i = -1; i < repeats; ++i) {
      synchronize();
      const double start = hostNowMs();
      comm.allReduce(buffer, ReduceOp::Avg, "link probe")->wait();
      synchronize();
      if (i >= 0) samples.emplace_back(static_cast<double>(buffer.nbytes()), hostNowMs() - start);
    }
  }
  return fitLinkCost(samples);
}

BackwardProfile profileFromStep(const runtime::StepRecord& step, const std::vector<std::string>& names) {
  double start = 0, end = 0;
  for (const runtime::Span& phase : step.phases) {
    if (phase.name != runtime::phaseName(runtime::Phase::Backward)) continue;
    start = phase.startMs;
    end = phase.endMs;
  }
  std::map<std::string, double> layerEnd;
  for (const runtime::Span& layer : step.layers) layerEnd[layer.name] = layer.endMs - start;
  BackwardProfile profile;
  profile.endMs = end - start;
  for (const std::string& name : names) {
    auto it = layerEnd.find(runtime::layerOf(name));
    profile.readyMs.push_back(it == layerEnd.end() ? profile.endMs : it->second);
  }
  return profile;
}

WireCost wholeBucket(const Bucket& bucket) { return {1, static_cast<double>(bucket.bytes())}; }

double modelledExposedMs(const BucketPlan& plan, const BackwardProfile& profile, const LinkCost& link,
                         const BucketWire& wire) {
  MINIDP_CHECK(profile.readyMs.size() == plan.slots.size(),
               "backward profile of " << profile.readyMs.size() << " parameters, plan of " << plan.slots.size());
  double end = 0;
  for (const Bucket& bucket : plan.buckets) {
    double ready = 0;
    for (int p : bucket.params) ready = std::max(ready, profile.readyMs[p]);
    const WireCost cost = wire ? wire(bucket) : wholeBucket(bucket);
    end = std::max(end, ready) + cost.collectives * link.alphaMs + cost.bytes * link.msPerByte;
  }
  return std::max(0.0, end - profile.endMs);
}

std::vector<CapChoice> modelCaps(const std::vector<ParamInfo>& params, const BackwardProfile& profile,
                                 const LinkCost& link, const std::vector<size_t>& candidates, size_t firstCapBytes,
                                 const BucketWire& wire, size_t& best) {
  MINIDP_CHECK(!candidates.empty(), "no bucket caps to model");
  std::vector<CapChoice> out;
  best = 0;
  for (size_t cap : candidates) {
    const BucketPlan plan = planBuckets(params, cap, std::min(firstCapBytes, cap));
    out.push_back({cap, modelledExposedMs(plan, profile, link, wire)});
    const CapChoice& b = out[best];
    if (out.back().exposedMs < b.exposedMs || (out.back().exposedMs == b.exposedMs && cap > b.capBytes)) {
      best = out.size() - 1;
    }
  }
  return out;
}

size_t chooseBucketCap(Communicator& comm, const std::vector<ParamInfo>& params, const BackwardProfile& profile,
                       const LinkCost& link, size_t firstCapBytes, const BucketWire& wire, std::string& report) {
  double totalBytes = 0;
  for (const ParamInfo& p : params) totalBytes += static_cast<double>(p.numel) * dtypeSize(p.dtype);
  std::vector<size_t> candidates;
  for (double mb : {1, 2, 5, 10, 25, 50, 100, 200, 400}) candidates.push_back(mibToBytes(mb));
  const size_t wholeMib = mibToBytes(std::ceil(totalBytes / 1048576.0));  // whole MiB, in bytes
  if (wholeMib > candidates.back()) candidates.push_back(wholeMib);       // one bucket for everything
  size_t best = 0;
  const std::vector<CapChoice> choices = modelCaps(params, profile, link, candidates, firstCapBytes, wire, best);
  char text[160];
  std::snprintf(text, sizeof text, "bucket cap auto: link %s, backward %.2f ms; modelled exposed ms per cap (MB):",
                link.describe().c_str(), profile.endMs);
  std::string line = text;
  for (const CapChoice& c : choices) {
    std::snprintf(text, sizeof text, " %g: %.2f", bytesToMib(c.capBytes), c.exposedMs);
    line += text;
  }
  // Ranks time their own link and backward; every rank takes rank 0's choice and report.
  const std::vector<std::string> all = comm.allGather(std::to_string(choices[best].capBytes) + "\n" + line);
  const size_t split = all[0].find('\n');
  const size_t chosen = std::stoull(all[0].substr(0, split));
  std::snprintf(text, sizeof text, "; chose %g MB", bytesToMib(chosen));
  report = all[0].substr(split + 1) + text;
  return chosen;
}

AutoBucketCap::AutoBucketCap(Communicator& comm, Device device)
    : comm_(comm), link_(measureLinkCost(comm, device, 256 << 10, 32 << 20, 3)) {}

void AutoBucketCap::beginProfile(runtime::StepTimer& timer) {
  timerDetailed_ = timer.detailed();
  timer.setDetailed(true);
}

size_t AutoBucketCap::choose(runtime::StepTimer& timer, const Reducer& reducer, const std::vector<ParamInfo>& params,
                             const std::vector<Shape>& shapes, int rowBucket, size_t firstCapBytes, std::string& report) {
  std::vector<std::string> names;
  for (const ParamInfo& p : params) names.push_back(p.name);
  const BackwardProfile profile = profileFromStep(timer.peek(true).back(), names);
  timer.setDetailed(timerDetailed_);
  // A bucket costs what its hook puts on the link (bf16: half the bytes; PowerSGD: its factors, in two
  // collectives).
  const CommHook& hook = reducer.hook();
  const DType grad = params.front().dtype;
  const int world = comm_.worldSize();
  int rowParam = -1;
  WireCost rowCost;
  if (rowBucket >= 0) {
    // The row gather of the first step: each rank's rows (in the wire's dtype) all-gathered, the (world - 1) x
    // rows that an all-reduce of world / 2 x rows moves, and the ids' gather.
    const BucketTiming& t = reducer.lastStepTimings()[rowBucket];
    if (t.bytes < reducer.plan().buckets[rowBucket].bytes()) {
      rowParam = reducer.plan().buckets[rowBucket].params.front();
      const double wire = static_cast<double>(dtypeSize(hook.wireDType(grad))) / static_cast<double>(dtypeSize(grad));
      rowCost = {2, static_cast<double>(t.bytes) * world / 2 * wire};
    }
  }
  const BucketWire wire = [&](const Bucket& bucket) {
    if (bucket.params.size() == 1 && bucket.params[0] == rowParam) return rowCost;
    std::vector<Shape> of;
    for (int p : bucket.params) of.push_back(shapes[p]);
    return hook.wireCost(of, grad, world);
  };
  return chooseBucketCap(comm_, params, profile, link_, firstCapBytes, wire, report);
}

}  // namespace minidp::distributed
