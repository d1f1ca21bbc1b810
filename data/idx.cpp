#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <memory>

#include "base/check.h"

namespace minidp {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `n` bytes into `dst`; returns how many arrived (fewer only at end of file).
int64_t readUpTo(gzFile f, uint8_t* dst, int64_t n, const std::string& path) {
  // gzread takes an unsigned int length: read in chunks well below that.
  constexpr int64_t kChunk = 1 << 24;
  int64_t got = 0;
  while (got < n) {
    const unsigned want = static_cast<unsigned>(std::min(kChunk, n - got));
    const int r = gzread(f, dst + got, want);
    if (r < 0) {
      int code = 0;
      const char* why = gzerror(f, &code);
      throwError(path + ": read failed after " + std::to_string(got) + " bytes: " + why, __FILE__, __LINE__);
    }
    if (r == 0) break;
    got += r;
  }
  return got;
}

}  // namespace

IdxArray readIdx(const std::string& path) {
  MINIDP_CHECK(std::filesystem::is_regular_file(path), "IDX file " << path << " does not exist");
  GzFile f(gzopen(path.c_str(), "rb"));
  MINIDP_CHECK(f != nullptr, "cannot open IDX file " << path);

  uint8_t head[4];
  const int64_t headGot = readUpTo(f.get(), head, 4, path);
  MINIDP_CHECK(headGot == 4, path << ": file holds " << headGot << " bytes, too short for an IDX header");
  MINIDP_CHECK(head[0] == 0 && head[1] == 0, path << ": not an IDX file: magic must start with two zero bytes, got 0x"
                                                  << std::hex << int(head[0]) << " 0x" << int(head[1]));
  MINIDP_CHECK(head[2] == 0x08,
               path << ": IDX type 0x" << std::hex << int(head[2]) << " is not supported, only 0x08 (unsigned byte)");
  const int ndims = head[3];
  MINIDP_CHECK(ndims >= 1, path << ": IDX header declares 0 dimensions");

  std::vector<uint8_t> dimBytes(4 * ndims);
  const int64_t dimGot = readUpTo(f.get(), dimBytes.data(), 4 * ndims, path);
  MINIDP_CHECK(dimGot == 4 * ndims, path << ": truncated header: " << ndims << " dimensions need " << 4 * ndims
                                         << " bytes, file holds " << dimGot);

  IdxArray out;
  int64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    const uint8_t* b = &dimBytes[4 * d];
    const int64_t dim = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | b[3];
    MINIDP_CHECK(dim == 0 || total <= std::numeric_limits<int64_t>::max() / dim, path << ": IDX dimensions overflow");
    total *= dim;
    out.dims.push_back(dim);
  }

  // Grow while reading so that a corrupt header claiming terabytes fails on the size check, not in new.
  constexpr int64_t kStep = 1 << 24;
  int64_t got = 0;
  while (got < total) {
    const int64_t step = std::min(kStep, total - got);
    out.data.resize(got + step);
    const int64_t r = readUpTo(f.get(), out.data.data() + got, step, path);
    got += r;
    if (r < step) break;
  }
  MINIDP_CHECK(got == total, path << ": truncated: expected " << total << " data bytes, file holds " << got);
  uint8_t extra;
  MINIDP_CHECK(readUpTo(f.get(), &extra, 1, path) == 0,
               path << ": file holds more than the " << total << " data bytes its header declares");
  return out;
}

}  // namespace minidp
