// CUDA graphs: work enqueued on the compute stream (and the streams it forks to through events, such as a
// communicator's comm stream) captured once and replayed with the same kernels, in the same order, on the
// same addresses.
#pragma once

#include <functional>

#include "base/stream.h"

#if !MINIDP_WITH_CUDA
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
#endif

namespace minidp::runtime {

/// True while `stream` is being captured into a CUDA graph (false without CUDA).
bool capturing(cudaStream_t stream);

/// A captured graph of the compute stream (RAII: the graph, its executable and its allocator pool).
class CapturedGraph {
 public:
  /// Captures what `body` enqueues on the compute stream, in relaxed mode (other threads, e.g. the watchdog,
  /// keep querying events). Meanwhile the caching allocator serves `body` from this graph's private pool
  /// (runtime::beginGraphPool), so the replayed addresses stay the graph's. `body` must enqueue no host
  /// synchronisation and must have run eagerly before (cuBLAS handles, workspaces, optimizer tables exist).
  explicit CapturedGraph(const std::function<void()>& body);
  /// Waits for the compute stream (replays in flight read the pool), then frees the graph and its pool.
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  /// Enqueues one replay on the compute stream.
  void replay();

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int pool_ = -1;
};

}  // namespace minidp::runtime
