// The training loop of minidp-train as a library call: rank 0 prints a line per logged step, the
// evaluation, and last a one-line JSON summary for scripts. Logged steps also say how much all-reduce time
// the step had and how much of it was exposed (not hidden behind backward); --trace writes a Chrome trace
// of the last steps; --metrics writes the logged steps as JSON lines (tools/plot_metrics.py draws them).
#include "train/training_loop.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "framework/distributed/comm/backends/emulated_communicator.h"
#include "framework/nn/checkpoint.h"
#include "framework/runtime/device.h"
#include "models/registry.h"
#include "train/metrics.h"
#include "train/nonfinite_steps.h"
#include "train/run_checks.h"
#include "train/stop_signal.h"
#include "train/trace.h"
#include "train/trainer.h"

namespace minidp::train {

namespace {

std::string modelList() {
  std::string names;
  for (const std::string& name : models::registeredModels()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

int runTraining(int argc, char** argv, const std::string& program) {
  // SIGTERM / SIGINT / SIGHUP from the very start: noted during start-up, acted on before the first step.
  StopSignals signals;
  CLI::App app{program + ": data-parallel training of a registered model (" + modelList() + ")"};
  Options opts;
  opts.model = modelFromCommandLine(argc, argv, opts.model);  // its flags and defaults join the others
  addOptions(app, opts);
  addLoopOptions(app, opts);
  addResumeOptions(app, opts);
  if (const int status = parseCommandLine(app, opts, argc, argv, program.c_str()); status >= 0) return status;
  if (const int usage = checkUsage(opts, program)) return usage;

  Session session;
  return runGuarded(program.c_str(), session, [&] {
    openSession(opts, session);
    checkTrainingRun(opts, session);
    Trainer trainer(opts, session);
    const int64_t firstStep = opts.resume.empty() ? 1 : trainer.resume(opts.resume) + 1;
    const bool printer = session.rank() == 0;
    if (printer) {
      std::printf("%s: %s, %lld parameters, %d rank(s) on %s (%s), communicator %s, overlap %s\n", program.c_str(),
                  opts.model.c_str(), static_cast<long long>(trainer.model().numParameters()), session.world(),
                  deviceName(opts.device), nameOf(precisionNames(), opts.precision).c_str(), session.comm->describe().c_str(),
                  distributed::overlapName(opts.ddp.overlap));
      std::printf("%s", trainer.ddp().describePlan().c_str());
      if (session.comm->name() == "emulated" && opts.ddp.zeroStage != 0) {
        std::printf("EMULATED: %s\n", distributed::EmulatedCommunicator::kZeroNote);
      }
    }
    using Clock = std::chrono::steady_clock;
    double lastLoss = NAN, totalMs = 0, totalCommMs = 0, totalExposedMs = 0;
    int64_t timedSteps = 0;
    std::vector<runtime::StepRecord> traced;
    auto windowStart = Clock::now();
    int64_t windowSteps = 0;
    // Training-loop reporting: metrics file, validation every --eval-every steps, throughput and MFU.
    std::unique_ptr<MetricsFile> metrics;
    if (printer && !opts.metrics.empty()) metrics = std::make_unique<MetricsFile>(opts.metrics);
    const models::ModelEntry& entry = models::findModel(opts.model);
    const bool tokens = entry.data == models::DataKind::Tokens;  // throughput in tokens
    const double itemsPerStep =
        static_cast<double>(trainer.samplesPerStep()) * static_cast<double>(tokens ? trainer.modelArgs().context : 1);
    // MFU: the model's count of matrix-product FLOPs per token or sample (models::ModelEntry::flopsPerItem).
    const double flopsPerStep = itemsPerStep * trainer.flopsPerItem();
    if (printer && firstStep > 1) {
      std::printf("resumed from %s after step %lld\n", opts.resume.c_str(), static_cast<long long>(firstStep - 1));
    }
    // The ranks stop together at a step boundary (train/stop_signal.h); a signal of the start-up before any step.
    StopAgreement stopping(session.mpi.get());
    if (const int signal = stopping.atStepEnd(true)) {
      return endBeforeFirstStep(opts, session.rank(), firstStep - 1, signal, program);
    }
    int64_t savedStep = firstStep - 1;
    for (int64_t step = firstStep; step <= opts.steps; ++step) {
      trainer.timer().setDetailed(!opts.trace.empty() && step > opts.steps - opts.traceSteps);
      Tensor loss = trainer.step();
      ++windowSteps;
      const bool evalNow = opts.evalEvery > 0 && step % opts.evalEvery == 0;
      const bool logged = step % opts.logEvery == 0 || step == opts.steps || evalNow;
      if (opts.checkFinite && !logged) checkFiniteLoss(trainer.globalLoss(loss), step, opts);
      if (logged) {
        // The only host synchronisation of the loop: reading the loss (averaged over the ranks).
        lastLoss = trainer.globalLoss(loss);
        checkFiniteStep(lastLoss, trainer.gradNorm(), step, opts);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - windowStart).count() / windowSteps;
        // The steps are complete now (the loss was read): their timings resolve without another stall.
        double commMs = 0, exposedMs = 0;
        const std::vector<runtime::StepRecord> records = trainer.timer().collect(true);
        for (const runtime::StepRecord& r : records) {
          commMs += r.commMs() / records.size();
          exposedMs += r.exposedMs() / records.size();
          if (r.step > opts.steps - opts.traceSteps) traced.push_back(r);
        }
        // The first window holds start-up costs (allocations, cuBLAS set-up); the mean excludes it.
        if (step > opts.logEvery || opts.steps <= opts.logEvery) {
          totalMs += ms * windowSteps;
          totalCommMs += commMs * windowSteps;
          totalExposedMs += exposedMs * windowSteps;
          timedSteps += windowSteps;
        }
        LogPoint point;
        point.step = step;
        point.totalSteps = opts.steps;
        point.loss = lastLoss;
        point.lr = trainer.lr();
        point.gradNorm = trainer.gradNorm();
        if (opts.skipNonFinite) point.skippedSteps = trainer.skippedSteps();
        point.stepMs = ms;
        point.itemsPerS = itemsPerStep * 1000.0 / ms;
        point.tokens = tokens;
        if (session.device == Device::CUDA)
          point.mfu = flopsPerStep / (ms / 1000.0) / session.world() / (opts.peakTflops * 1e12);
        if (session.world() > 1) {
          point.commMs = commMs;
          point.exposedCommMs = exposedMs;
        }
        if (evalNow) {
          const Evaluation e = trainer.evaluate();
          point.valLoss = e.loss;
          point.valAccuracy = e.accuracy;
        }
        if (metrics) metrics->append(point.toJson());
        if (printer) {
          std::printf("%s\n", point.terminalLine().c_str());
          std::fflush(stdout);
        }
        windowStart = Clock::now();
        windowSteps = 0;
      }
      if (opts.saveEvery > 0 && step % opts.saveEvery == 0 && step < opts.steps) {
        // Nothing non-finite saved over a good state (a logged step was checked above).
        if (!logged) checkFiniteStep(trainer.globalLoss(loss), trainer.gradNorm(), step, opts);
        trainer.saveState(opts.save, step);
        savedStep = step;
      }
      if (const int signal = stopping.atStepEnd(step == opts.steps)) {
        if (!logged && !opts.save.empty()) checkFiniteStep(trainer.globalLoss(loss), trainer.gradNorm(), step, opts);
        return endStoppedRun(trainer, opts, session.rank(), step, savedStep, signal, program);
      }
    }
    // Peak GPU memory held by tensors over the training steps (before evaluation's own allocations).
    const double peakMib = runtime::allocatorStats().peakAllocatedBytes / 1048576.0;
    // No validation (a token model with --eval-batches 0): no evaluation, no validation source, val_loss null.
    const bool validated = trainer.hasValidation();
    const Evaluation evaluation = trainer.evaluate();
    nlohmann::json summary = {{"model", opts.model},
                              {"device", deviceName(opts.device)},
                              {"world", session.world()},
                              {"steps", opts.steps},
                              {"batch_size", opts.batchSize},
                              {"overlap", distributed::overlapName(opts.ddp.overlap)},
                              {"final_loss", lastLoss},
                              {"mean_step_ms", timedSteps ? totalMs / timedSteps : NAN},
                              {"mean_comm_ms", timedSteps ? totalCommMs / timedSteps : NAN},
                              {"mean_exposed_comm_ms", timedSteps ? totalExposedMs / timedSteps : NAN}};
    summary["dtype"] = nameOf(precisionNames(), opts.precision);
    if (session.device == Device::CUDA) summary["peak_gpu_mib"] = peakMib;
    if (!opts.trace.empty()) {
      writeTrace(*session.comm, traced, opts.trace,
                 {{"program", program},
                  {"model", opts.model},
                  {"device", deviceName(opts.device)},
                  {"world", session.world()},
                  {"overlap", distributed::overlapName(opts.ddp.overlap)},
                  {"bucket_mb", distributed::bytesToMib(opts.ddp.bucketCapBytes)},
                  {"communicator", session.comm->describe()}});
      if (printer) std::printf("trace of %zu step(s) written to %s\n", traced.size(), opts.trace.c_str());
    }
    summary["val_loss"] = validated ? nlohmann::json(evaluation.loss) : nlohmann::json(nullptr);
    if (entry.evaluation == models::Evaluation::Accuracy) {
      summary["test_accuracy"] = evaluation.accuracy;
      if (printer) std::printf("test loss %.4f, accuracy %.4f\n", evaluation.loss, evaluation.accuracy);
    } else {
      if (printer && validated)
        std::printf("validation loss %.4f nats/%s\n", evaluation.loss, opts.dataSet() == DataSet::Llmc ? "token" : "byte");
      if (opts.sample > 0) {
        const std::string text = trainer.sample(opts.sample);  // every rank: the same forward passes
        if (printer) std::printf("sample: %s\n", text.c_str());
      }
    }
    if (!opts.save.empty()) {
      std::fflush(stdout);  // the evaluation's lines out before the save, which can take a while
      trainer.saveState(opts.save, opts.steps);
      if (printer) std::printf("saved %s\n", opts.save.c_str());
    }
    // A signal after the last step (every rank's, agreed): the run finished; the closing line says so.
    if (const int late = stopping.atStepEnd(true)) summary["signal"] = lateSignalNote(late);
    if (printer) std::printf("%s\n", summary.dump().c_str());
    return 0;
  });
}

}  // namespace minidp::train
