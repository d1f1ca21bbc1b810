// MINIDP_HOST_DEVICE: math shared by a CUDA kernel and its CPU twin compiles for both.
#pragma once

#if defined(__CUDACC__)
#define MINIDP_HOST_DEVICE __host__ __device__
#else
#define MINIDP_HOST_DEVICE
#endif
