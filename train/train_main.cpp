// minidp-train: trains the MLP on Fashion-MNIST or the GPT on fortunes / llm.c tokens, data-parallel over
// the ranks mpirun started (or alone). Rank 0 prints a line per logged step, the evaluation, and last a
// one-line JSON summary for scripts. Logged steps also say how much all-reduce time the step had and how
// much of it was exposed (not hidden behind backward); --trace writes a Chrome trace of the last steps.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "framework/runtime/device.h"
#include "train/run_checks.h"
#include "train/trace.h"
#include "train/trainer.h"

using namespace minidp;

int main(int argc, char** argv) {
  CLI::App app{"minidp-train: data-parallel training of the MLP (Fashion-MNIST) or GPT (fortunes)"};
  train::Options opts;
  train::addOptions(app, opts);
  train::addResumeOptions(app, opts);
  if (const int status = train::parseCommandLine(app, argc, argv, "minidp-train"); status >= 0) return status;

  train::Session session;
  return train::runGuarded("minidp-train", session, [&] {
    train::openSession(opts, session);
    train::checkTrainingRun(opts, session);
    train::Trainer trainer(opts, session);
    const int64_t firstStep = opts.resume.empty() ? 1 : trainer.resume(opts.resume) + 1;
    const bool printer = session.rank() == 0;
    if (printer) {
      std::printf("minidp-train: %s, %lld parameters, %d rank(s) on %s (%s), communicator %s, overlap %s\n",
                  opts.model.c_str(), static_cast<long long>(trainer.model().numParameters()), session.world(),
                  opts.device.c_str(), opts.dtype.c_str(), session.comm->describe().c_str(), opts.overlap.c_str());
      std::printf("%s", trainer.ddp().plan().describe().c_str());
    }
    using Clock = std::chrono::steady_clock;
    double lastLoss = NAN, totalMs = 0, totalCommMs = 0, totalExposedMs = 0;
    int64_t timedSteps = 0;
    std::vector<runtime::StepRecord> traced;
    auto windowStart = Clock::now();
    int64_t windowSteps = 0;
    if (printer && firstStep > 1) std::printf("resumed from %s after step %lld\n", opts.resume.c_str(),
                                              static_cast<long long>(firstStep - 1));
    for (int64_t step = firstStep; step <= opts.steps; ++step) {
      trainer.timer().setDetailed(!opts.trace.empty() && step > opts.steps - opts.traceSteps);
      Tensor loss = trainer.step();
      ++windowSteps;
      const bool logged = step % opts.logEvery == 0 || step == opts.steps;
      if (opts.checkFinite && !logged) train::checkFiniteLoss(trainer.globalLoss(loss), step, opts);
      if (logged) {
        // The only host synchronisation of the loop: reading the loss (averaged over the ranks).
        lastLoss = trainer.globalLoss(loss);
        train::checkFiniteLoss(lastLoss, step, opts);
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
        if (printer) {
          std::printf("step %6lld  loss %.4f  %.2f ms/step  %.0f samples/s", static_cast<long long>(step), lastLoss,
                      ms, trainer.samplesPerStep() * 1000.0 / ms);
          if (session.world() > 1) {
            std::printf("  all-reduce %.2f ms, exposed %.2f ms (%.0f%% hidden)", commMs, exposedMs,
                        commMs > 0 ? 100.0 * std::clamp(1.0 - exposedMs / commMs, 0.0, 1.0) : 0.0);
          }
          std::printf("\n");
          std::fflush(stdout);
        }
        windowStart = Clock::now();
        windowSteps = 0;
      }
      if (opts.saveEvery > 0 && step % opts.saveEvery == 0 && step < opts.steps) trainer.saveState(opts.save, step);
    }
    const double metric = trainer.evaluate();
    nlohmann::json summary = {{"model", opts.model},      {"device", opts.device},
                              {"world", session.world()}, {"steps", opts.steps},
                              {"batch_size", opts.batchSize}, {"overlap", opts.overlap},
                              {"final_loss", lastLoss},   {"mean_step_ms", timedSteps ? totalMs / timedSteps : NAN},
                              {"mean_comm_ms", timedSteps ? totalCommMs / timedSteps : NAN},
                              {"mean_exposed_comm_ms", timedSteps ? totalExposedMs / timedSteps : NAN}};
    if (!opts.trace.empty()) {
      train::writeTrace(*session.comm, traced, opts.trace,
                        {{"program", "minidp-train"}, {"model", opts.model}, {"device", opts.device},
                         {"world", session.world()}, {"overlap", opts.overlap}, {"bucket_mb", opts.bucketMb},
                         {"communicator", session.comm->describe()}});
      if (printer) std::printf("trace of %zu step(s) written to %s\n", traced.size(), opts.trace.c_str());
    }
    if (opts.model == "mlp") {
      summary["test_accuracy"] = metric;
      if (printer) std::printf("test accuracy %.4f\n", metric);
    } else {
      summary["val_loss"] = metric;
      if (printer) std::printf("validation loss %.4f nats/byte\n", metric);
      if (opts.sample > 0 && printer) {
        std::printf("sample: %s\n", trainer.sample("The ", opts.sample).c_str());
      }
    }
    if (!opts.save.empty()) {
      trainer.saveState(opts.save, opts.steps);
      if (printer) std::printf("saved %s\n", opts.save.c_str());
    }
    if (printer) std::printf("%s\n", summary.dump().c_str());
    return 0;
  });
}
