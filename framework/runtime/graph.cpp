#include "framework/runtime/graph.h"

#include <cstdio>

#include "base/check.h"
#include "framework/runtime/device.h"

#if MINIDP_WITH_CUDA
#include "base/cuda_check.h"
#endif

namespace minidp::runtime {

#if MINIDP_WITH_CUDA

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

CapturedGraph::CapturedGraph(const std::function<void()>& body) {
  cudaStream_t stream = computeStream();
  synchronize();  // the eager work before: nothing of it is in flight while the pool takes cached blocks
  pool_ = beginGraphPool();
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  try {
    body();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream, &broken);  // ends the capture so the stream is usable again
    if (broken) cudaGraphDestroy(broken);
    endGraphPool();
    releaseGraphPool(pool_);
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph_);
  endGraphPool();
  if (ended != cudaSuccess) releaseGraphPool(pool_);
  CUDA_CHECK(ended);
  CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

CapturedGraph::~CapturedGraph() {
  cudaError_t status = cudaStreamSynchronize(computeStream());
  if (exec_ && status == cudaSuccess) status = cudaGraphExecDestroy(exec_);
  if (graph_ && status == cudaSuccess) status = cudaGraphDestroy(graph_);
  if (status != cudaSuccess)
    std::fprintf(stderr, "minidp: destroying a CUDA graph failed: %s\n", cudaGetErrorString(status));
  releaseGraphPool(pool_);
}

void CapturedGraph::replay() { CUDA_CHECK(cudaGraphLaunch(exec_, computeStream())); }

#else  // CPU-only build

bool capturing(cudaStream_t) { return false; }
CapturedGraph::CapturedGraph(const std::function<void()>&) {
  throwError("CUDA graphs: minidp was built without CUDA", __FILE__, __LINE__);
}
CapturedGraph::~CapturedGraph() = default;
void CapturedGraph::replay() {}

#endif

}  // namespace minidp::runtime
