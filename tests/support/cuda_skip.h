// MINIDP_SKIP_WITHOUT_CUDA(): skips the current test when no CUDA device is visible (or minidp was built
// without CUDA). A reason may follow: `MINIDP_SKIP_WITHOUT_CUDA() << " (bf16 kernels run on CUDA only)";`.
#pragma once

#include <gtest/gtest.h>

#include "framework/runtime/device.h"

// The switch keeps an `else` after the macro from binding to its `if`, as gtest's own macros do.
#define MINIDP_SKIP_WITHOUT_CUDA()            \
  switch (0)                                  \
  case 0:                                     \
  default:                                    \
    if (::minidp::runtime::cudaAvailable()) { \
    } else                                    \
      GTEST_SKIP() << "no CUDA device"
