// Where memory lives: the device kind every floor names (tensors, streams, timers, communicators).
#pragma once

#include <cstdint>

namespace minidp {

/// Where a tensor's memory lives.
enum class Device : uint8_t { CPU, CUDA };

/// "cpu" or "cuda".
inline const char* deviceName(Device device) { return device == Device::CPU ? "cpu" : "cuda"; }

}  // namespace minidp
