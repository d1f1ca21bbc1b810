// NVTX ranges: named host intervals that Nsight Systems shows on its timeline (bucket launches, step
// phases). The NVTX calls live in nvtx.cpp, so this header needs neither CUDA nor the NVTX headers.
#pragma once

namespace minidp::runtime {

/// An NVTX range over a host scope, shown by Nsight Systems; nothing without CUDA.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace minidp::runtime
