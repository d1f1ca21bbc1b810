#include "framework/distributed/comm/backends/nccl_communicator.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/cuda_check.h"
#include "framework/distributed/job/launcher.h"
#include "framework/distributed/job/mpi_environment.h"
#include "framework/runtime/device.h"

namespace minidp::distributed {

namespace {

ncclDataType_t ncclType(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::I32: return ncclInt32;
    case DType::BF16: return ncclBfloat16;
    case DType::I8: return ncclInt8;
    case DType::U8: return ncclUint8;
    case DType::F16: return ncclFloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ncclOpOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

void checkCuda(const char* what, const Tensor& t) {
  MINIDP_CHECK(t.defined() && t.isCuda(), "nccl " << what << " needs a CUDA tensor");
}

/// ncclConfig_t::CTAPolicy's value for `policy` (not Default, which leaves the field unset); an error when the
/// NCCL minidp was built with has no such policy.
int ctaPolicyValue(NcclCtaPolicy policy) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
  return policy == NcclCtaPolicy::Zero ? NCCL_CTA_POLICY_ZERO : NCCL_CTA_POLICY_EFFICIENCY;
#elif NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  MINIDP_CHECK(policy == NcclCtaPolicy::Efficiency, "--nccl-cta-policy zero needs NCCL 2.28 or later; minidp was built with "
                                                        << NCCL_MAJOR << "." << NCCL_MINOR);
  return NCCL_CTA_POLICY_EFFICIENCY;
#else
  throwError(std::string("--nccl-cta-policy ") + ncclCtaPolicyName(policy) +
                 " needs NCCL 2.27 or later; minidp was built with " + std::to_string(NCCL_MAJOR) + "." +
                 std::to_string(NCCL_MINOR),
             __FILE__, __LINE__);
#endif
}

/// Whether the NCCL minidp was built with has symmetric windows (ncclCommWindowRegister, 2.27+).
constexpr bool kHasWindows = NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0);

}  // namespace

NcclCommunicator::NcclCommunicator(const CommOptions& opts, MpiEnvironment* env)
    : env_(env),
      maxCtas_(opts.ncclMaxCtas),
      minCtas_(opts.ncclMinCtas),
      ctaPolicy_(opts.ncclCtaPolicy),
      buffers_(opts.ncclBuffers) {
  if (env_) {
    rank_ = env_->rank();
    world_ = env_->worldSize();
  }
  // Every rank sets up its device (rank 0 also creates the unique id), then all ranks agree before the id
  // is broadcast: a rank that fails here would otherwise leave the others waiting in the broadcast or in
  // ncclCommInitRankConfig. A bad setup is one error, naming the failed ranks, on every rank.
  ncclUniqueId id{};
  std::string problem;
  try {
    device_ = selectGpu(opts.gpu, env_ ? env_->localRank() : 0, runtime::cudaDeviceCount());
    runtime::setDevice(device_);
    warnIfSerialisedStreams(rank_);
    stream_ = std::make_unique<CommStream>(opts.commHighPriority);
    if (ctaPolicy_ != NcclCtaPolicy::Default) ctaPolicyValue(ctaPolicy_);  // the same error on every rank
    MINIDP_CHECK(kHasWindows || buffers_ != CommBuffers::Symmetric,
                 "--nccl-buffers symmetric needs NCCL 2.27 or later; minidp was built with " << NCCL_MAJOR << "."
                                                                                          << NCCL_MINOR);
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  } catch (const std::exception& e) {
    problem = e.what();
  }
  const ExchangeLabel label("NCCL set-up agreement");
  const std::vector<std::string> problems = allGather(problem);
  std::string failed;
  for (int r = 0; r < world_; ++r) {
    if (!problems[r].empty()) failed += (failed.empty() ? "rank " : "; rank ") + std::to_string(r) + ": " + problems[r];
  }
  MINIDP_CHECK(failed.empty(), "NCCL communicator setup failed on " << failed);
  if (env_) env_->broadcastBytes(&id, sizeof id, 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (maxCtas_ > 0) {
    config.maxCTAs = maxCtas_;
    config.minCTAs = minCtas_ > 0 ? std::min(minCtas_, maxCtas_) : 1;  // NCCL's default minimum may exceed it
  } else if (minCtas_ > 0) {
    config.minCTAs = minCtas_;
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  if (ctaPolicy_ != NcclCtaPolicy::Default) config.CTAPolicy = ctaPolicyValue(ctaPolicy_);
#endif
  {
    Deadline init(opts.watchdogSeconds,
                  "minidp watchdog: rank " + std::to_string(rank_) +
                      ": ncclCommInitRank did not complete in time (a rank stopped during "
                      "NCCL set-up); aborting every rank",
                  [] { MpiEnvironment::abortAll(1); });
    NCCL_CHECK(ncclCommInitRankConfig(&comm_, world_, id, rank_, &config));
  }

  const int device = device_;
  watchdog_ = std::make_unique<Watchdog>(
      opts.watchdogSeconds, rank_,
      [this](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
        abort();
      },
      [device] { cudaSetDevice(device); }, [this] { return asyncError(); },
      [this](const std::string& tag) { return env_ ? env_->census(tag) : std::string(); });
}

NcclCommunicator::~NcclCommunicator() {
  stream_.reset();    // waits for the comm stream (the watchdog still ends a hang), releases its works
  watchdog_.reset();  // releases the works it held, complete by now
  releasePendingBuffers(true);
  if (!aborted_) {
    const ncclResult_t status = ncclCommDestroy(comm_);
    if (status != ncclSuccess) std::fprintf(stderr, "minidp: ncclCommDestroy failed: %s\n", ncclGetErrorString(status));
  }
}

std::string NcclCommunicator::asyncError() const {
  if (aborted_) return {};
  ncclResult_t state = ncclSuccess;
  const ncclResult_t status = ncclCommGetAsyncError(comm_, &state);
  if (status != ncclSuccess) state = status;
  if (state == ncclSuccess || state == ncclInProgress) return {};
  return "minidp watchdog: rank " + std::to_string(rank_) + ": NCCL asynchronous error: " + ncclGetErrorString(state) +
         " (" + ncclGetLastError(comm_) + "); aborting every rank";
}

std::string NcclCommunicator::describe() const {
  std::ostringstream os;
  os << "nccl: rank " << rank_ << " of " << world_ << " on cuda:" << device_ << ", comm stream priority "
     << stream_->priority() << ", maxCTAs " << (maxCtas_ > 0 ? std::to_string(maxCtas_) : "default") << ", minCTAs "
     << (minCtas_ > 0 ? std::to_string(minCtas_) : maxCtas_ > 0 ? "1" : "default") << ", CTA policy " << ncclCtaPolicyName(ctaPolicy_)
     << ", buffers " << commBuffersName(buffers_) << ", ncclAvg";
  return os.str();
}

Tensor NcclCommunicator::allocateCommBuffer(int64_t numel, DType dtype, Device device) {
  if (buffers_ == CommBuffers::Plain || device != Device::CUDA) {
    return Communicator::allocateCommBuffer(numel, dtype, device);
  }
  if (buffers_ == CommBuffers::Registered) releasePendingBuffers(false);  // local calls: any time will do
  const size_t bytes = std::max<size_t>(static_cast<size_t>(numel) * dtypeSize(dtype), 1);
  void* ptr = nullptr;
  NCCL_CHECK(ncclMemAlloc(&ptr, bytes));
  void* handle = nullptr;  // ncclCommRegister's handle, or the window
  try {
    if (buffers_ == CommBuffers::Registered) {
      NCCL_CHECK(ncclCommRegister(comm_, ptr, bytes, &handle));
    } else {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
      ncclWindow_t window = nullptr;
      NCCL_CHECK(ncclCommWindowRegister(comm_, ptr, bytes, &window, NCCL_WIN_COLL_SYMMETRIC));
      handle = window;
      std::lock_guard<std::mutex> lock(releases_->mutex);
      releases_->windows.emplace_back(ptr, handle);
#endif
    }
  } catch (...) {
    ncclMemFree(ptr);
    throw;
  }
  const bool symmetric = buffers_ == CommBuffers::Symmetric;
  return Tensor::fromExternal(ptr, {numel}, dtype, device, [releases = releases_, handle, symmetric](void* p) {
    std::lock_guard<std::mutex> lock(releases->mutex);
    if (!releases->closed) {
      if (symmetric) {
        releases->releasedWindows.push_back(p);
      } else {
        releases->pending.emplace_back(p, handle);
      }
      return;
    }
    const cudaError_t sync = cudaDeviceSynchronize();
    const ncclResult_t status = sync == cudaSuccess ? ncclMemFree(p) : ncclSuccess;
    if (sync != cudaSuccess || status != ncclSuccess) {
      std::fprintf(stderr, "minidp: freeing an NCCL buffer failed: %s\n",
                   sync != cudaSuccess ? cudaGetErrorString(sync) : ncclGetErrorString(status));
    }
  });
}

void NcclCommunicator::releasePendingBuffers(bool close) {
  std::vector<std::pair<void*, void*>> pending, windows;
  std::vector<void*> releasedWindows;
  {
    std::lock_guard<std::mutex> lock(releases_->mutex);
    pending.swap(releases_->pending);
    if (close) {
      windows.swap(releases_->windows);
      releasedWindows.swap(releases_->releasedWindows);
    }
    releases_->closed = close;
  }
  if (pending.empty() && windows.empty()) return;
  // No collective or kernel may still use them. After an abort (or a device error) they stay allocated.
  const cudaError_t sync = aborted_ ? cudaErrorUnknown : cudaDeviceSynchronize();
  if (sync != cudaSuccess) {
    std::fprintf(stderr, "minidp: %zu NCCL buffer(s) left allocated: the communicator was aborted or the device failed\n",
                 pending.size() + windows.size());
    return;
  }
  const auto report = [](ncclResult_t status) {
    if (status != ncclSuccess) std::fprintf(stderr, "minidp: releasing an NCCL buffer failed: %s\n", ncclGetErrorString(status));
  };
  for (const auto& [ptr, handle] : pending) {
    ncclResult_t status = ncclCommDeregister(comm_, handle);
    if (status == ncclSuccess) status = ncclMemFree(ptr);
    report(status);
  }
  // Every window, on every rank in the same (allocation) order; the memory of those still held by a tensor
  // is freed when that tensor goes (closed: memory only).
  for (const auto& [ptr, handle] : windows) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    report(ncclCommWindowDeregister(comm_, static_cast<ncclWindow_t>(handle)));
#endif
    if (std::find(releasedWindows.begin(), releasedWindows.end(), ptr) != releasedWindows.end()) report(ncclMemFree(ptr));
  }
}

std::shared_ptr<Work> NcclCommunicator::allReduce(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, false, tag);
}

std::shared_ptr<Work> NcclCommunicator::reduceScatter(Tensor buffer, ReduceOp op, const std::string& tag) {
  return reduce(std::move(buffer), op, true, tag);
}

std::shared_ptr<Work> NcclCommunicator::reduce(Tensor buffer, ReduceOp op, bool scatter, const std::string& tag) {
  checkCuda("reduction", buffer);
  checkReduction(buffer, op, scatter, world_);
  return stream_->launch(
      tag, buffer,
      [&](cudaStream_t s) {
        const size_t n = buffer.numel();
        char* data = static_cast<char*>(buffer.raw());
        const ncclDataType_t type = ncclType(buffer.dtype());
        const ncclRedOp_t ncclOp = ncclOpOf(op);
        if (!scatter) {
          NCCL_CHECK(ncclAllReduce(data, data, n, type, ncclOp, comm_, s));
          return;
        }
        const size_t count = n / world_;
        // In place: the receive buffer is this rank's shard of the send buffer.
        NCCL_CHECK(ncclReduceScatter(data, data + rank_ * count * dtypeSize(buffer.dtype()), count, type, ncclOp,
                                     comm_, s));
      },
      watch());
}

std::shared_ptr<Work> NcclCommunicator::allGatherShards(Tensor buffer, const std::string& tag) {
  checkCuda("allGatherShards", buffer);
  checkReduction(buffer, ReduceOp::Sum, true, world_);
  return stream_->launch(
      tag, buffer,
      [&](cudaStream_t s) {
        const size_t count = buffer.numel() / world_;
        char* data = static_cast<char*>(buffer.raw());
        NCCL_CHECK(ncclAllGather(data + rank_ * count * dtypeSize(buffer.dtype()), data, count,
                                 ncclType(buffer.dtype()), comm_, s));
      },
      watch());
}

std::shared_ptr<Work> NcclCommunicator::allGather(Tensor input, Tensor output, const std::string& tag) {
  checkCuda("allGather", output);
  checkAllGather(input, output, world_);
  return stream_->launch(
      tag, input,
      [&](cudaStream_t s) {
        NCCL_CHECK(ncclAllGather(input.raw(), output.raw(), input.numel(), ncclType(input.dtype()), comm_, s));
      },
      watch());
}

std::shared_ptr<Work> NcclCommunicator::enqueue(const std::string& tag, Tensor keep,
                                                const std::function<void(cudaStream_t)>& task) {
  return stream_->launch(tag, std::move(keep), task);
}

void NcclCommunicator::watchReplay(const std::string& tag) {
  watchdog_->watch(stream_->launch(tag, Tensor(), [](cudaStream_t) {}));
}

void NcclCommunicator::broadcast(Tensor& tensor, int root) {
  checkCuda("broadcast", tensor);
  MINIDP_CHECK(root >= 0 && root < world_, "broadcast from rank " << root << " of " << world_);
  std::shared_ptr<Work> work = stream_->launch(
      "broadcast", tensor,
      [&](cudaStream_t s) {
        NCCL_CHECK(ncclBroadcast(tensor.raw(), tensor.raw(), tensor.numel(), ncclType(tensor.dtype()), root, comm_, s));
      },
      watch());
  work->wait();
  CUDA_CHECK(cudaStreamSynchronize(stream_->stream()));  // setup only: surface errors here
}

std::vector<std::string> NcclCommunicator::allGather(const std::string& bytes) {
  return env_ ? env_->allGather(bytes) : std::vector<std::string>{bytes};
}

std::function<void(const std::shared_ptr<Work>&)> NcclCommunicator::watch() {
  return [this](const std::shared_ptr<Work>& work) { watchdog_->watch(work); };
}

void NcclCommunicator::abort() noexcept {
  const auto abortComm = [this] {
    if (aborted_.exchange(true)) return;
    const ncclResult_t status = ncclCommAbort(comm_);
    if (status != ncclSuccess) std::fprintf(stderr, "minidp: ncclCommAbort failed: %s\n", ncclGetErrorString(status));
  };
  // The watchdog's health check queries comm_: no query may run while (or after) ncclCommAbort frees it.
  if (watchdog_) {
    watchdog_->runExclusive(abortComm);
  } else {
    abortComm();
  }
  if (env_) MpiEnvironment::abortAll(1);
}

}  // namespace minidp::distributed
