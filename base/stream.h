// The stream and event types of launchers and timers; a CPU-only build still names them so headers compile.
#pragma once

#if MINIDP_WITH_CUDA
#include <cuda_runtime_api.h>
#else
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#endif
