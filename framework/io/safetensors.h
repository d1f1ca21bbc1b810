// The safetensors file format on raw bytes: 8-byte little-endian header length N, N bytes of JSON
// header (space-padded), then the tensor bytes at the header's data_offsets, relative to the buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace minidp {

/// One tensor as stored: dtype name ("F32", "F64", "I32", "I64", "U8", "U16", "BF16", ...), shape, raw bytes.
struct SafeTensor {
  std::string dtype;
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<uint8_t> bytes;  // prod(shape) * dtype size, little-endian, row-major
};

/// The contents of a safetensors file.
struct SafeTensorFile {
  std::vector<std::pair<std::string, SafeTensor>> tensors;  // in file order of data offsets
  std::map<std::string, std::string> metadata;              // the "__metadata__" entry

  /// The tensor called `name`; throws minidp::Error naming it if the file has none.
  const SafeTensor& at(const std::string& name) const;
};

/// Which tensors readSafetensors reads. Called for each tensor in file order with its name, dtype and shape
/// (bytes empty), after the whole header was checked and before any tensor's bytes are read or memory
/// taken for them: true reads the tensor, false leaves it out of the result; throwing refuses the file.
using SafeTensorFilter = std::function<bool(const std::string& name, const SafeTensor& header)>;

/// The largest header readSafetensors takes (as the reference implementation: 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

/// Reads and validates a safetensors file (the tensors `filter` accepts; all without one); errors name the
/// file and the offending tensor.
SafeTensorFile readSafetensors(const std::string& path, const SafeTensorFilter& filter = {});
/// The checked header of a safetensors file: its metadata, no tensors (readSafetensors reading none).
SafeTensorFile readSafetensorsHeader(const std::string& path);

/// Writes tensors in the given order through writeFileAtomically (a temporary, fsync, rename), so `path`
/// is never half-written; equal inputs give byte-identical files.
void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, SafeTensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace minidp
