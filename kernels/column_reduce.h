// How the two-stage column reductions (bias and LayerNorm parameter gradients) split the rows: stage one
// reduces each slice of rows of a column tile into a partial (slices x C) scratch, stage two adds each
// column's partials in a fixed order (8 lanes, each over every 8th slice in order, then the lanes in
// order). The split depends only on (N, C), never on the GPU, so the summation order, and hence the bits,
// are the same on every device and every run.
#pragma once

#include <algorithm>
#include <cstdint>

namespace minidp::kernels {

/// Threads per row of a stage-one block, each over P consecutive columns (one, or a 16-byte pack).
constexpr int64_t kColumnTile = 32;
/// bf16 columns of a 16-byte pack: the packed kernel's blocks cover kColumnTile of them.
constexpr int64_t kColumnPackWidth = 8;
/// Stage-one blocks aimed for: eight 256-thread blocks per SM of an H200 (132 SMs), a full load of
/// resident threads to keep enough loads in flight. Counted for the packed kernel on bf16 (256 columns a
/// block); fp32 and fp64 packed blocks cover 128 and 64 columns and scalar ones 32, so they launch more.
constexpr int64_t kColumnReductionBlocks = 1056;
/// Fewest rows a slice is given: below that the partials cost more traffic than they save.
constexpr int64_t kMinRowsPerSlice = 32;
/// Most slices: stage two reads every slice's partial of each column.
constexpr int64_t kMaxColumnSlices = 128;

/// Row slices of an (N, C) column reduction.
inline int64_t columnSlices(int64_t N, int64_t C) {
  constexpr int64_t kTileColumns = kColumnTile * kColumnPackWidth;
  const int64_t tiles = std::max<int64_t>(1, (C + kTileColumns - 1) / kTileColumns);
  const int64_t wanted = (kColumnReductionBlocks + tiles - 1) / tiles;
  const int64_t most = std::max<int64_t>(1, (N + kMinRowsPerSlice - 1) / kMinRowsPerSlice);
  return std::clamp<int64_t>(wanted, 1, std::min(most, kMaxColumnSlices));
}

/// Rows of each slice (the last may hold fewer).
inline int64_t columnSliceRows(int64_t N, int64_t C) {
  const int64_t slices = columnSlices(N, C);
  return std::max<int64_t>(1, (N + slices - 1) / slices);
}

}  // namespace minidp::kernels
