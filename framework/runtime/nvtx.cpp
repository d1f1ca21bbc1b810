#include "framework/runtime/nvtx.h"

#if MINIDP_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace minidp::runtime {

#if MINIDP_WITH_CUDA
NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }
#else
NvtxRange::NvtxRange(const char*) {}
NvtxRange::~NvtxRange() {}
#endif

}  // namespace minidp::runtime
