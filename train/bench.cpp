// minidp-bench (train::runBench): step time with all-reduce overlap off and on, and why. For each comm stream priority and
// NCCL maxCTAs value (every combination), each bucket size and each repeat it trains the same model from the same seed
// twice, overlap off then on (so drift hits both alike): --warmup steps untimed, then --steps steps each synchronised
// and timed (CUDA events around the step; the host clock on the CPU). Rank 0 prints one row per run:
//
//   step_ms     median (and p90) over the timed steps of the slowest rank's step time
//   compute_ms  step time minus exposed communication (median over steps of the ranks' mean)
//   comm_ms     time during which a bucket all-reduce ran (union of their spans)
//   exposed_ms  time the compute stream waited for the all-reduces (the finalize phase)
//   E           1 - (T_on - T_compute) / T_comm, with T_compute and T_comm of the overlap-off run:
//               the share of the off run's communication that overlap hid (1 all, 0 none)
//   speed-up    T_off / T_on
//   H           (T_off - T_on) / min(T_comm, T_backward), T_comm and T_backward of the overlap-off run:
//               the share of the hideable communication that was hidden (E cannot reach 1 when the
//               all-reduce is longer than backward; H can)
//   slowdown_ms compute_ms of the overlap-on run minus the off run's: what collectives running beside
//               backward cost it in SMs and memory bandwidth (the quantity --nccl-cta-policy, --nccl-max-ctas
//               and --nccl-buffers trade against comm_ms; one run per setting, the communicator line says which)
//
// minidp-train's flags but those of its loop (train::addLoopOptions: --overlap, which the sweep sets, --log-every,
// --eval-every, --eval-batches, --save, --metrics, --peak-tflops, --sample, --temperature, --top-k) and of
// resuming, plus the sweep flags. The first bucket's cap is min(--first-bucket-mb, bucket size). NCCL reads maxCTAs and
// the comm stream is created when a communicator is, so each (--comm-priority-list, --nccl-max-ctas-list) combination
// gets a new communicator.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/bench.h"

#include "framework/distributed/comm/backends/emulated_communicator.h"
#include "framework/io/atomic_file.h"
#include "framework/runtime/device.h"
#include "models/registry.h"
#include "train/run_checks.h"
#include "train/trace.h"
#include "train/trainer.h"

#if MINIDP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace minidp;

namespace {

struct BenchOptions {
  std::vector<double> bucketMbList;
  std::vector<int> ncclMaxCtasList;
  std::vector<std::string> commPriorityList;  // "high" | "default"
  int64_t warmup = 5;
  int64_t repeats = 1;
  std::string json;
};

/// Per timed step, over the ranks: the slowest rank's step and the ranks' mean components.
struct StepSample {
  double stepMs = 0, computeMs = 0, commMs = 0, exposedMs = 0, backwardMs = 0;
};

/// The communicator settings swept: one communicator per combination.
struct CommConfig {
  bool highPriority = true;
  int ctas = 0;
};

/// One table row: a run (or, with repeat -1, every repeat of a configuration pooled).
struct Row {
  CommConfig comm;
  double bucketMb = 0;  // 0: auto
  double chosenMb = 0;  // the cap used (auto: the cost model's choice)
  int repeat = 0;
  distributed::Overlap overlap = distributed::Overlap::AfterBackward;
  std::vector<StepSample> samples;
  double stepMs = 0, p90Ms = 0, computeMs = 0, commMs = 0, exposedMs = 0, backwardMs = 0;
  double efficiency = NAN, speedup = NAN, hidden = NAN, slowdownMs = NAN;  // overlap-on rows only
  double peakMib = NAN;  // this rank's peak GPU memory held by tensors during the run (CUDA only)
};

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  if (q == 0.5) {
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));  // nearest rank
  return v[std::max<size_t>(rank, 1) - 1];
}

double median(const std::vector<StepSample>& samples, double StepSample::*field) {
  std::vector<double> v;
  for (const StepSample& s : samples) v.push_back(s.*field);
  return quantile(v, 0.5);
}

void summarise(Row& row) {
  std::vector<double> steps;
  for (const StepSample& s : row.samples) steps.push_back(s.stepMs);
  row.stepMs = quantile(steps, 0.5);
  row.p90Ms = quantile(steps, 0.9);
  row.computeMs = median(row.samples, &StepSample::computeMs);
  row.commMs = median(row.samples, &StepSample::commMs);
  row.exposedMs = median(row.samples, &StepSample::exposedMs);
  row.backwardMs = median(row.samples, &StepSample::backwardMs);
}

/// E and speed-up of an overlap-on row against its overlap-off partner.
void compare(const Row& off, Row& on) {
  on.speedup = off.stepMs / on.stepMs;
  on.efficiency = off.commMs > 0 ? 1.0 - (on.stepMs - off.computeMs) / off.commMs : NAN;
  const double hideable = std::min(off.commMs, off.backwardMs);
  on.hidden = hideable > 0 ? (off.stepMs - on.stepMs) / hideable : NAN;
  on.slowdownMs = on.computeMs - off.computeMs;
}

/// Per timed step: max over ranks of the step time, mean over ranks of the rest.
std::vector<StepSample> samplesOf(const std::vector<std::vector<runtime::StepRecord>>& ranks) {
  std::vector<StepSample> out(ranks.front().size());
  const double n = static_cast<double>(ranks.size());
  for (const auto& steps : ranks) {
    MINIDP_CHECK(steps.size() == out.size(), "ranks timed different numbers of steps");
    for (size_t k = 0; k < steps.size(); ++k) {
      out[k].stepMs = std::max(out[k].stepMs, steps[k].stepMs);
      out[k].computeMs += steps[k].computeMs() / n;
      out[k].commMs += steps[k].commMs() / n;
      out[k].exposedMs += steps[k].exposedMs() / n;
      out[k].backwardMs += steps[k].phaseMs(runtime::Phase::Backward) / n;
    }
  }
  return out;
}

const char* priorityName(bool highPriority) { return highPriority ? "high" : "default"; }

std::string cell(double v, const char* format) {
  if (std::isnan(v)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

std::string runLabel(const CommConfig& comm, double bucketMb, distributed::Overlap overlap) {
  char text[128];
  std::snprintf(text, sizeof text, "bucket %s MB, overlap %s, priority %s",
                bucketMb > 0 ? cell(bucketMb, "%g").c_str() : "auto", distributed::overlapName(overlap),
                priorityName(comm.highPriority));
  std::string label = text;
  if (comm.ctas > 0) label += ", maxCTAs " + std::to_string(comm.ctas);
  return label;
}

/// Trains `warmup + steps` steps of a fresh Trainer, synchronising after each; the timed steps'
/// samples. Appends the last traceSteps timed steps of every rank to `traced` when `trace`.
Row run(const train::Options& base, const BenchOptions& bench, train::Session& session, const CommConfig& comm,
        double bucketMb, int repeat, distributed::Overlap overlap, bool trace,
        std::vector<runtime::StepRecord>& traced) {
  train::Options o = base;
  o.ddp.bucketCapBytes = distributed::mibToBytes(bucketMb);  // the sweep's MiB, as bytes once here
  if (bucketMb > 0) o.ddp.firstBucketCapBytes = std::min(base.ddp.firstBucketCapBytes, o.ddp.bucketCapBytes);
  o.ddp.overlap = overlap;
  train::Trainer trainer(o, session);
  runtime::resetPeakMemory();
  const std::string label = runLabel(comm, bucketMb, overlap);
  std::vector<runtime::StepRecord> timed;
  const int64_t total = bench.warmup + o.steps;
  for (int64_t i = 1; i <= total; ++i) {
    trainer.timer().setDetailed(trace && i > total - o.traceSteps);
    trainer.step();
    // The per-step synchronisation: waits for the step's end mark, then its spans resolve.
    for (runtime::StepRecord& r : trainer.timer().collect(true)) {
      if (i <= bench.warmup) continue;
      r.label = label;
      if (trainer.timer().detailed()) traced.push_back(r);
      timed.push_back(std::move(r));
    }
  }
  Row row;
  row.comm = comm;
  row.bucketMb = bucketMb;
  row.chosenMb = distributed::bytesToMib(trainer.ddp().bucketCapBytes());
  row.repeat = repeat;
  row.overlap = overlap;
  row.samples = samplesOf(train::gatherSteps(*session.comm, timed));
  if (session.device == Device::CUDA) row.peakMib = runtime::allocatorStats().peakAllocatedBytes / 1048576.0;
  summarise(row);
  return row;
}

/// The cap as given, or "auto:25" when the cost model chose it.
std::string bucketCell(const Row& r) {
  char text[32];
  std::snprintf(text, sizeof text, r.bucketMb > 0 ? "%g" : "auto:%g", r.bucketMb > 0 ? r.bucketMb : r.chosenMb);
  return text;
}

void printRow(const Row& r) {
  std::printf("%8s %8s %9s %6s %7s %9.3f %9.3f %10.3f %9.3f %10.3f %7s %8s %6s %8s %11s\n",
              priorityName(r.comm.highPriority), r.comm.ctas > 0 ? std::to_string(r.comm.ctas).c_str() : "default",
              bucketCell(r).c_str(), r.repeat < 0 ? "all" : std::to_string(r.repeat).c_str(),
              distributed::overlapName(r.overlap), r.stepMs, r.p90Ms, r.computeMs, r.commMs, r.exposedMs,
              cell(r.efficiency, "%.3f").c_str(), cell(r.speedup, "%.3f").c_str(), cell(r.hidden, "%.3f").c_str(),
              cell(r.peakMib, "%.0f").c_str(), cell(r.slowdownMs, "%.3f").c_str());
}

nlohmann::json nullable(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

nlohmann::json rowJson(const Row& r) {
  std::vector<double> steps;
  for (const StepSample& s : r.samples) steps.push_back(s.stepMs);
  return {{"comm_priority", priorityName(r.comm.highPriority)},
          {"nccl_max_ctas", r.comm.ctas},
          {"bucket_mb", r.bucketMb > 0 ? nlohmann::json(r.bucketMb) : nlohmann::json("auto")},
          {"bucket_mb_used", r.chosenMb},
          {"repeat", r.repeat < 0 ? nlohmann::json("all") : nlohmann::json(r.repeat)},
          {"overlap", distributed::overlapName(r.overlap)},
          {"step_ms_median", r.stepMs},
          {"step_ms_p90", r.p90Ms},
          {"compute_ms", r.computeMs},
          {"comm_ms", r.commMs},
          {"exposed_ms", r.exposedMs},
          {"E", nullable(r.efficiency)},
          {"speedup", nullable(r.speedup)},
          {"peak_mib", nullable(r.peakMib)},
          {"backward_ms", r.backwardMs},
          {"H", nullable(r.hidden)},
          {"compute_slowdown_ms", nullable(r.slowdownMs)},
          {"step_ms", steps}};
}

// The ZeRO settings of the header line: ZeRO-1/2's gather, ZeRO-3's prefetch, keeping and gather dtype.
std::string zeroSettings(const train::Options& opts) {
  switch (opts.ddp.zeroStage) {
    case 0: return "";
    case 3:
      return " (prefetch " + std::to_string(opts.zeroPrefetch) +
             (opts.zeroKeepGathered ? ", units kept gathered" : ", units freed after forward") + ", parameters " +
             train::nameOf(train::zeroParamDTypeNames(), opts.zeroParamDType) + ")";
    default: return " (gather " + train::nameOf(train::zeroGatherNames(), opts.zeroGather) + ")";
  }
}

std::string utcNow() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

/// The model's flags (its defaults, overridden by the command line) as JSON numbers, lists and strings.
nlohmann::json modelFlagsJson(const train::Options& opts) {
  const models::ModelEntry& entry = models::findModel(opts.model);
  const models::FlagValues values = models::flagValues(opts.model, entry, opts.modelFlags);
  nlohmann::json out = nlohmann::json::object();
  for (const models::ModelFlag& flag : entry.flags) {
    switch (flag.kind) {
      case models::FlagKind::Integer: out[flag.name] = values.integer(flag.name); break;
      case models::FlagKind::Integers: out[flag.name] = values.integers(flag.name); break;
      case models::FlagKind::Number: out[flag.name] = values.number(flag.name); break;
      case models::FlagKind::Text: out[flag.name] = values.text(flag.name); break;
    }
  }
  return out;
}

std::string deviceDescription(const train::Session& session) {
#if MINIDP_WITH_CUDA
  if (session.device == Device::CUDA) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, runtime::currentDevice()) == cudaSuccess)
      return std::string("cuda: ") + prop.name;
  }
#endif
  return deviceName(session.device);
}

}  // namespace

namespace minidp::train {

int runBench(int argc, char** argv, const std::string& program) {
  CLI::App app{program + ": step time with all-reduce overlap off vs on, per bucket size"};
  train::Options opts;
  opts.steps = 20;  // timed steps per run
  // The runs are not validated: nor is the validation text checked.
  opts.evalBatches = 0;
  opts.model = train::modelFromCommandLine(argc, argv, opts.model);  // its flags and defaults join the others
  train::addOptions(app, opts);
  BenchOptions bench;
  app.add_option("--bucket-mb-list", bench.bucketMbList,
                 "Bucket caps to sweep (MB), e.g. auto,1,5,25 (default: --bucket-mb); auto: the cost model's")
      ->delimiter(',')
      ->transform(train::bucketMb(true));
  app.add_option("--nccl-max-ctas-list", bench.ncclMaxCtasList,
                 "NCCL maxCTAs values to sweep, a new communicator each (default: --nccl-max-ctas)")
      ->delimiter(',')
      ->transform(train::numberIn(0, 1024, true));
  app.add_option("--comm-priority-list", bench.commPriorityList,
                 "Comm stream priorities to sweep, high and/or default, a new communicator each "
                 "(default: high, or default with --no-comm-priority)")
      ->delimiter(',')
      ->check(CLI::IsMember({"high", "default"}));
  app.add_option("--warmup", bench.warmup, "Untimed steps before each run's timed --steps")
      ->transform(train::numberIn(0, train::kMaxCount, true))
      ->capture_default_str();
  app.add_option("--repeats", bench.repeats, "Off/on pairs per bucket size, alternating")
      ->transform(train::numberIn(1, 1e6L, true))
      ->capture_default_str();
  app.add_option("--json", bench.json, "Write every row and the configuration to this JSON file")
      ->transform(train::nonEmptyPath());
  if (const int status = train::parseCommandLine(app, opts, argc, argv, program.c_str()); status >= 0) return status;
  const std::vector<train::OutputFile> outputs = {{"--json", bench.json}};  // besides --trace
  if (bench.bucketMbList.empty()) bench.bucketMbList = {distributed::bytesToMib(opts.ddp.bucketCapBytes)};
  if (bench.ncclMaxCtasList.empty()) bench.ncclMaxCtasList = {opts.comm.ncclMaxCtas};
  for (int ctas : bench.ncclMaxCtasList) {  // the flags, with each communicator of the sweep, before any runs
    train::Options each = opts;
    each.comm.ncclMaxCtas = ctas;
    if (const int usage = train::checkUsage(each, program, outputs)) return usage;
  }
  if (bench.commPriorityList.empty()) bench.commPriorityList = {priorityName(opts.comm.commHighPriority)};
  std::vector<CommConfig> commConfigs;  // priority outer, maxCTAs inner
  for (const std::string& priority : bench.commPriorityList)
    for (int ctas : bench.ncclMaxCtasList) commConfigs.push_back({priority == "high", ctas});

  train::Session session;
  return train::runGuarded(program.c_str(), session, [&] {
    train::openSession(opts, session);
    train::checkTrainingRun(opts, session, outputs);  // as minidp-train: the data, the memory, the output paths
    const bool printer = session.rank() == 0;
    const bool emulated = session.comm->name() == "emulated";
    nlohmann::json config = {{"model", opts.model},
                             {"dtype", nameOf(precisionNames(), opts.precision)},
                             {"batch_size", opts.batchSize},
                             {"grad_accum", opts.gradAccum},
                             {"world", session.world()},
                             {"device", deviceDescription(session)},
                             {"warmup", bench.warmup},
                             {"steps", opts.steps},
                             {"repeats", bench.repeats},
                             {"first_bucket_mb", distributed::bytesToMib(opts.ddp.firstBucketCapBytes)},
                             {"seed", opts.seed},
                             {"date", utcNow()},
                             {"emulated", emulated},
                             {"comm_hook", opts.ddp.commHook.name},
                             {"zero", opts.ddp.zeroStage},
                             {"zero_gather", nameOf(zeroGatherNames(), opts.zeroGather)},
                             {"zero_prefetch", opts.zeroPrefetch},
                             {"zero_keep_gathered", opts.zeroKeepGathered},
                             {"zero_param_dtype", nameOf(zeroParamDTypeNames(), opts.zeroParamDType)},
                             {"cuda_graph", opts.cudaGraph},
                             {"cast_weights", opts.castWeights},
                             {"attention", session.attention},
                             {"nccl",
                              {{"min_ctas", opts.comm.ncclMinCtas},
                               {"cta_policy", distributed::ncclCtaPolicyName(opts.comm.ncclCtaPolicy)},
                               {"buffers", distributed::commBuffersName(opts.comm.ncclBuffers)}}}};
    config[opts.model] = modelFlagsJson(opts);  // the model's flags, under its name
    if (emulated) {
      config["emulated_link"] = {{"world", opts.comm.emulatedWorld},
                                 {"gbps", opts.comm.emulatedGBps},
                                 {"latency_us", opts.comm.emulatedLatencyUs}};
    }
    std::vector<Row> rows;
    std::vector<std::string> communicators;
    std::vector<runtime::StepRecord> traced;
    for (size_t c = 0; c < commConfigs.size(); ++c) {
      const CommConfig& comm = commConfigs[c];
      if (c > 0 || comm.ctas != opts.comm.ncclMaxCtas || comm.highPriority != opts.comm.commHighPriority) {
        opts.comm.ncclMaxCtas = comm.ctas;
        opts.comm.commHighPriority = comm.highPriority;
        session.comm.reset();  // the previous communicator goes before the next is created
        session.comm = distributed::makeCommunicator(opts.comm, session.mpi.get());
      }
      communicators.push_back(session.comm->describe());
      if (printer) {
        std::printf(
            "%s%s: %s, %d rank(s) on %s (%s), batch %lld per rank, warmup %lld, %lld timed step(s) "
            "x %lld repeat(s), gradients on the wire %s, ZeRO %d%s, attention %s\ncommunicator %s\n",
            emulated ? "EMULATED " : "", program.c_str(), opts.model.c_str(), session.world(), deviceDescription(session).c_str(),
            nameOf(precisionNames(), opts.precision).c_str(), static_cast<long long>(opts.batchSize), static_cast<long long>(bench.warmup),
            static_cast<long long>(opts.steps), static_cast<long long>(bench.repeats), opts.ddp.commHook.name.c_str(), opts.ddp.zeroStage,
            zeroSettings(opts).c_str(),
            session.attention.c_str(), communicators.back().c_str());
        if (emulated) {
          std::printf("EMULATED: one process modelling %d ranks; comm times are the model's, not a real network's%s%s\n",
                      opts.comm.emulatedWorld, opts.ddp.zeroStage ? "; " : "",
                      opts.ddp.zeroStage ? distributed::EmulatedCommunicator::kZeroNote : "");
        }
        std::printf("%8s %8s %9s %6s %7s %9s %9s %10s %9s %10s %7s %8s %6s %8s %11s\n", "priority", "maxCTAs",
                    "bucket_mb", "repeat", "overlap", "step_ms", "p90_ms", "compute_ms", "comm_ms", "exposed_ms", "E",
                    "speed-up", "H", "peak_mib", "slowdown_ms");
        std::fflush(stdout);
      }
      for (double bucketMb : bench.bucketMbList) {
        std::vector<Row> pooled(2);  // off, on: every repeat's steps
        const auto poolOf = [&pooled](distributed::Overlap mode) -> Row& {
          return pooled[mode == distributed::Overlap::DuringBackward];
        };
        for (int64_t repeat = 0; repeat < bench.repeats; ++repeat) {
          const bool trace = !opts.trace.empty() && repeat == 0;
          Row off = run(opts, bench, session, comm, bucketMb, static_cast<int>(repeat),
                        distributed::Overlap::AfterBackward, trace, traced);
          Row on = run(opts, bench, session, comm, bucketMb, static_cast<int>(repeat),
                       distributed::Overlap::DuringBackward, trace, traced);
          compare(off, on);
          for (const Row* r : {&off, &on}) {
            Row& pool = poolOf(r->overlap);
            pool.samples.insert(pool.samples.end(), r->samples.begin(), r->samples.end());
            pool.chosenMb = r->chosenMb;
            if (printer) printRow(*r);
            rows.push_back(*r);
          }
          if (printer) std::fflush(stdout);
        }
        if (bench.repeats > 1) {
          for (auto overlap : {distributed::Overlap::AfterBackward, distributed::Overlap::DuringBackward}) {
            Row& pool = poolOf(overlap);
            pool.comm = comm;
            pool.bucketMb = bucketMb;
            pool.repeat = -1;
            pool.overlap = overlap;
            summarise(pool);
          }
          compare(pooled[0], pooled[1]);
          for (const Row& r : pooled) {
            if (printer) printRow(r);
            rows.push_back(r);
          }
        }
      }
    }
    config["communicators"] = communicators;
    if (!opts.trace.empty()) {
      train::writeTrace(*session.comm, traced, opts.trace, {{"program", program}, {"config", config}});
      if (printer) std::printf("trace of %zu step(s) per rank written to %s\n", traced.size(), opts.trace.c_str());
    }
    if (printer && !bench.json.empty()) {
      nlohmann::json out = {{"config", config}, {"rows", nlohmann::json::array()}};
      for (const Row& r : rows) out["rows"].push_back(rowJson(r));
      writeFileAtomically(bench.json, out.dump(2));
      std::printf("results written to %s\n", bench.json.c_str());
    }
    return 0;
  });
}

}  // namespace minidp::train
