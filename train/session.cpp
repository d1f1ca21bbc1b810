#include "train/session.h"

#include <cstdio>

#include "framework/distributed/job/launcher.h"
#include "framework/runtime/device.h"
#include "framework/tensor/tensor_math.h"
#include "models/registry.h"
#include "train/run_checks.h"

namespace minidp::train {

void openSession(Options& opts, Session& s) {
  if (opts.steps == 0) opts.steps = models::findModel(opts.model).defaultSteps;
  s.device = opts.device;
  s.dtype = parameterDType(opts.precision);
  s.compute = computeDType(opts.precision);
  if (const std::string problem = usageProblem(opts); !problem.empty()) throw Error(problem);  // checkUsage's rules
  ops::setFp32Gemm(opts.tf32 ? ops::Fp32Gemm::Tf32 : ops::Fp32Gemm::Exact);
  ops::setBf16Gemm(opts.plainGemms ? ops::Bf16Gemm::Plain : ops::Bf16Gemm::CublasLt);
  // MPI first: any failure after it (on any rank) ends every rank through runGuarded.
  s.verbose = opts.verbose;
  if (distributed::MpiEnvironment::launchedByMpirun()) {
    s.mpi = std::make_unique<distributed::MpiEnvironment>(opts.comm.watchdogSeconds);
    agreeOnOptions(*s.mpi, opts.parsedFlags);  // before the communicator, whose set-up they may differ in
  }
  if (s.device == Device::CUDA) {
    MINIDP_CHECK(runtime::cudaAvailable(),
                 "--device cuda, but no CUDA device is available (or minidp was built "
                 "without CUDA)");
    runtime::setDevice(
        distributed::selectGpu(opts.comm.gpu, s.mpi ? s.mpi->localRank() : 0, runtime::cudaDeviceCount()));
  }
  distributed::CommOptions comm = opts.comm;  // where it runs is --device's, not stored twice
  comm.cuda = s.device == Device::CUDA;
  s.comm = distributed::makeCommunicator(comm, s.mpi.get());
}

int runGuarded(const char* program, Session& session, const std::function<int()>& body) {
  try {
    return body();
  } catch (const AgreedError& e) {
    const int rank = session.comm ? session.rank() : session.mpi ? session.mpi->rank() : 0;
    if (rank == 0) {
      std::fprintf(stderr, "%s: %s: %s\n", program, e.status() == kUsageExit ? "usage error" : "error",
                   userMessage(e.what(), session.verbose).c_str());
    }
    return e.status();
  } catch (const std::exception& e) {
    const std::string head = std::string(program) + ": error: ", message = userMessage(e.what(), session.verbose);
    if (session.mpi && session.mpi->worldSize() > 1) {
      // Found on one rank or on several: every rank ends, and one line says why (MpiEnvironment::endJob): the
      // message alone when every rank failed alike, else naming the lowest rank that failed.
      const std::string rank = "rank " + std::to_string(session.mpi->rank()) + ": ";
      session.mpi->endJob(1, message, [&](bool alike) { return head + (alike ? "" : rank) + message; });
    }
    // Alone, or before MPI started (from the flags, which every rank shares): the first rank says it.
    if (distributed::detectLauncher().rank <= 0) std::fprintf(stderr, "%s%s\n", head.c_str(), message.c_str());
    return 1;
  }
}

}  // namespace minidp::train
