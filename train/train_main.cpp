// minidp-train: trains the MLP on Fashion-MNIST or the GPT on fortunes / llm.c tokens, data-parallel over
// the ranks mpirun started (or alone). Rank 0 prints a line per logged step, the evaluation, and last a
// one-line JSON summary for scripts.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "framework/nn/checkpoint.h"
#include "framework/runtime/device.h"
#include "train/trainer.h"

using namespace minidp;

int main(int argc, char** argv) {
  CLI::App app{"minidp-train: data-parallel training of the MLP (Fashion-MNIST) or GPT (fortunes)"};
  train::Options opts;
  train::addOptions(app, opts);
  CLI11_PARSE(app, argc, argv);

  train::Session session;
  return train::runGuarded("minidp-train", session, [&] {
    session = train::openSession(opts);
    train::Trainer trainer(opts, session);
    const bool printer = session.rank() == 0;
    if (printer) {
      std::printf("minidp-train: %s, %lld parameters, %d rank(s) on %s (%s), communicator %s, overlap %s\n",
                  opts.model.c_str(), static_cast<long long>(trainer.model().numParameters()), session.world(),
                  opts.device.c_str(), opts.dtype.c_str(), session.comm->describe().c_str(), opts.overlap.c_str());
      std::printf("%s", trainer.ddp().plan().describe().c_str());
    }
    using Clock = std::chrono::steady_clock;
    double lastLoss = NAN, totalMs = 0;
    int64_t timedSteps = 0;
    auto windowStart = Clock::now();
    int64_t windowSteps = 0;
    for (int64_t step = 1; step <= opts.steps; ++step) {
      Tensor loss = trainer.step();
      ++windowSteps;
      if (step % opts.logEvery == 0 || step == opts.steps) {
        // The only host synchronisation of the loop: reading the loss (averaged over the ranks).
        lastLoss = trainer.globalLoss(loss);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - windowStart).count() / windowSteps;
        // The first window holds start-up costs (allocations, cuBLAS set-up); the mean excludes it.
        if (step > opts.logEvery || opts.steps <= opts.logEvery) {
          totalMs += ms * windowSteps;
          timedSteps += windowSteps;
        }
        if (printer) {
          std::printf("step %6lld  loss %.4f  %.2f ms/step  %.0f samples/s\n", static_cast<long long>(step), lastLoss,
                      ms, trainer.samplesPerStep() * 1000.0 / ms);
          std::fflush(stdout);
        }
        windowStart = Clock::now();
        windowSteps = 0;
      }
    }
    const double metric = trainer.evaluate();
    nlohmann::json summary = {{"model", opts.model},      {"device", opts.device},
                              {"world", session.world()}, {"steps", opts.steps},
                              {"batch_size", opts.batchSize}, {"overlap", opts.overlap},
                              {"final_loss", lastLoss},   {"mean_step_ms", timedSteps ? totalMs / timedSteps : NAN}};
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
      if (printer) nn::saveCheckpoint(trainer.model(), opts.save);
      if (printer) std::printf("saved %s\n", opts.save.c_str());
    }
    if (printer) std::printf("%s\n", summary.dump().c_str());
    return 0;
  });
}
