// Reader for the IDX format of the MNIST family, plain or gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace minidp {

/// The contents of an IDX file of unsigned bytes.
struct IdxArray {
  std::vector<int64_t> dims;  // outermost first, e.g. (count, rows, cols)
  std::vector<uint8_t> data;  // prod(dims) bytes, row-major
};

/// Reads an IDX file of type 0x08 (unsigned byte), plain or .gz; throws minidp::Error naming the path
/// and the defect (missing file, wrong magic, unsupported type, truncated or trailing data).
IdxArray readIdx(const std::string& path);

}  // namespace minidp
