#include "train/session.h"

#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include "framework/distributed/job/launcher.h"
#include "framework/ops/ops.h"
#include "framework/runtime/device.h"
#include "framework/tensor/tensor_math.h"
#include "models/registry.h"
#include "train/errors.h"
#include "train/usage_rules.h"

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
  s.attention = ops::attentionKernels(s.device);  // a bad MINIDP_ATTENTION fails here, before any model is built
  distributed::CommOptions comm = opts.comm;  // where it runs is --device's, not stored twice
  comm.cuda = s.device == Device::CUDA;
  s.comm = distributed::makeCommunicator(comm, s.mpi.get());
}

void agreeOnOptions(distributed::MpiEnvironment& mpi, const std::string& parsedFlags) {
  const distributed::ExchangeLabel label("start-up options agreement");
  const std::vector<std::string> texts = mpi.allGather(parsedFlags);
  // "name=value" lines, in registration order; values as typed (config_to_str quotes text: "x", 'y').
  const auto lines = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string value = line.substr(eq + 1);
      if (value.size() >= 2 && (value[0] == '"' || value[0] == '\'') && value.back() == value[0])
        value = value.substr(1, value.size() - 2);
      out.emplace_back(line.substr(0, eq), value.empty() ? "(not given)" : value);
    }
    return out;
  };
  const auto valueIn = [](const std::vector<std::pair<std::string, std::string>>& flags, const std::string& name) {
    for (const auto& [n, v] : flags) {
      if (n == name) return v;
    }
    return std::string("(not given)");
  };
  for (size_t r = 1; r < texts.size(); ++r) {
    if (texts[r] == texts[0]) continue;
    const auto first = lines(texts[0]), other = lines(texts[r]);
    std::vector<std::string> names;  // rank 0's flags, then the others' (a rank may have another model's)
    for (const auto& flags : {first, other}) {
      for (const auto& [name, value] : flags) names.push_back(name);
    }
    for (const std::string& name : names) {
      const std::string mine = valueIn(first, name), theirs = valueIn(other, name);
      if (mine == theirs) continue;
      const std::string rank = "rank " + std::to_string(r);
      throw AgreedError("rank 0 and " + rank + " were started with different flags: --" + name + " " + mine +
                            " on rank 0, " + theirs + " on " + rank + "; give every rank the same flags",
                        kUsageExit);
    }
  }
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
