// The stream type every launcher takes; a CPU-only build still names it so that headers compile.
#pragma once

#if MINIDP_WITH_CUDA
#include <cuda_runtime_api.h>
#else
typedef struct CUstream_st* cudaStream_t;
#endif
