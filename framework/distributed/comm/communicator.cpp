#include "framework/distributed/comm/communicator.h"

#include <algorithm>
#include <utility>

namespace minidp::distributed {

int64_t paddedNumel(int64_t numel, int world) { return (numel + world - 1) / world * world; }

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

void checkReduction(const Tensor& buffer, ReduceOp op, bool scatter, int world) {
  MINIDP_CHECK(buffer.defined(), "a reduction of an undefined tensor");
  MINIDP_CHECK(op != ReduceOp::Avg || isFloatingPoint(buffer.dtype()),
               "an average of " << dtypeName(buffer.dtype()) << " values: avg needs a floating-point buffer");
  MINIDP_CHECK(!scatter || buffer.numel() % world == 0,
               "reduce-scatter of " << buffer.numel() << " elements over " << world << " ranks: pad the buffer");
}

void checkAllGather(const Tensor& input, const Tensor& output, int world) {
  MINIDP_CHECK(input.defined() && output.defined() && input.dtype() == output.dtype() &&
                   input.device() == output.device() && output.numel() == input.numel() * world,
               "all-gather of " << input.numel() << " elements over " << world << " ranks into " << output.numel()
                                << ": the output must hold world x input elements of its dtype on its device");
}

namespace {

/// The name `value` has in `names`.
template <typename Mode>
const char* nameOf(const std::map<std::string, Mode>& names, Mode value) {
  for (const auto& [name, mode] : names) {
    if (mode == value) return name.c_str();
  }
  throwError("unnamed mode " + std::to_string(static_cast<int>(value)), __FILE__, __LINE__);
}

}  // namespace

const std::map<std::string, NcclCtaPolicy>& ncclCtaPolicies() {
  static const std::map<std::string, NcclCtaPolicy> names = {
      {"default", NcclCtaPolicy::Default}, {"efficiency", NcclCtaPolicy::Efficiency}, {"zero", NcclCtaPolicy::Zero}};
  return names;
}

const char* ncclCtaPolicyName(NcclCtaPolicy policy) { return nameOf(ncclCtaPolicies(), policy); }

const std::map<std::string, CommBuffers>& commBuffersModes() {
  static const std::map<std::string, CommBuffers> names = {
      {"plain", CommBuffers::Plain}, {"registered", CommBuffers::Registered}, {"symmetric", CommBuffers::Symmetric}};
  return names;
}

const char* commBuffersName(CommBuffers buffers) { return nameOf(commBuffersModes(), buffers); }

std::string ncclSettingsProblem(const CommOptions& opts, const std::string& backend) {
  if (opts.ncclMinCtas > 0 && opts.ncclMaxCtas > 0 && opts.ncclMinCtas > opts.ncclMaxCtas)
    return "--nccl-min-ctas " + std::to_string(opts.ncclMinCtas) + " exceeds --nccl-max-ctas " +
           std::to_string(opts.ncclMaxCtas);
  std::string flag;  // the first NCCL-only setting given
  if (opts.ncclMinCtas > 0) {
    flag = "--nccl-min-ctas " + std::to_string(opts.ncclMinCtas);
  } else if (opts.ncclCtaPolicy != NcclCtaPolicy::Default) {
    flag = std::string("--nccl-cta-policy ") + ncclCtaPolicyName(opts.ncclCtaPolicy);
  } else if (opts.ncclBuffers != CommBuffers::Plain) {
    flag = std::string("--nccl-buffers ") + commBuffersName(opts.ncclBuffers);
  }
  if (flag.empty() || backend == "nccl") return {};
  return flag + " is a setting of the nccl communicator; this run's is " + backend;
}

bool Communicator::allAgree(bool ok) {
  for (const std::string& vote : allGather(ok ? "1" : "0")) {
    if (vote != "1") return false;
  }
  return true;
}

}  // namespace minidp::distributed
