// minidp-bench-allreduce: the raw all-reduce bandwidth of the communicator at the bucket sizes training
// uses, so the benchmark can say what share of the link a bucket all-reduce reaches. A loop of
// Communicator::allReduce per size after warm-up; algorithm bandwidth = bytes / time, bus bandwidth =
// algbw * 2 (N - 1) / N (nccl-tests' convention: what each link carries in a ring).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "framework/io/atomic_file.h"
#include "framework/runtime/device.h"
#include "train/run_checks.h"
#include "train/trainer.h"

using namespace minidp;

int main(int argc, char** argv) {
  CLI::App app{"minidp-bench-allreduce: raw all-reduce bandwidth at bucket sizes"};
  train::Options opts;
  std::vector<double> sizesMb = {0.25, 1, 5, 25, 100};
  int iters = 20, warmup = 5;
  std::string jsonPath;
  train::addSessionOptions(app, opts);
  app.add_option("--sizes-mb", sizesMb, "Buffer sizes in MB (MiB)")
      ->transform(train::numberIn(0, 1e5L, false, true))
      ->capture_default_str();
  app.add_option("--iters", iters, "Timed all-reduces per size")
      ->transform(train::numberIn(1, 1e6L, true))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed all-reduces per size")
      ->transform(train::numberIn(0, 1e6L, true))
      ->capture_default_str();
  app.add_option("--json", jsonPath, "Also write the rows as JSON")->transform(train::nonEmptyPath());
  if (const int status = train::parseCommandLine(app, opts, argc, argv, "minidp-bench-allreduce"); status >= 0) {
    return status;
  }

  train::Session session;
  return train::runGuarded("minidp-bench-allreduce", session, [&] {
    train::openSession(opts, session);
    const int world = session.world();
    const bool printer = session.rank() == 0;
    if (printer) {
      std::printf("minidp-bench-allreduce: %s\n%10s %12s %12s %12s\n", session.comm->describe().c_str(), "MB",
                  "time_us", "algbw_GBps", "busbw_GBps");
    }
    nlohmann::json rows = nlohmann::json::array();
    for (double mb : sizesMb) {
      const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(mb * 1048576 / 4));
      Tensor buffer = Tensor::zeros({n}, DType::F32, session.device);
      const auto sync = [&] {
        // Every rank's collectives have finished: the compute stream waited on them (CUDA).
        runtime::synchronize();
      };
      for (int i = 0; i < warmup; ++i) session.comm->allReduce(buffer, distributed::ReduceOp::Avg, "warmup")->wait();
      sync();
      session.comm->allAgree(true);  // start the timed loop together
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) session.comm->allReduce(buffer, distributed::ReduceOp::Avg, "bench")->wait();
      sync();
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
      const double bytes = static_cast<double>(n) * 4, algbw = bytes / us * 1e-3;
      const double busbw = world > 1 ? algbw * 2.0 * (world - 1) / world : algbw;
      if (printer) std::printf("%10.2f %12.1f %12.2f %12.2f\n", bytes / 1048576, us, algbw, busbw);
      rows.push_back({{"mb", bytes / 1048576}, {"time_us", us}, {"algbw_gbps", algbw}, {"busbw_gbps", busbw}});
    }
    if (printer && !jsonPath.empty()) {
      nlohmann::json out = {{"communicator", session.comm->describe()}, {"world", world}, {"rows", rows}};
      writeFileAtomically(jsonPath, out.dump(2) + "\n");
    }
    return 0;
  });
}
