// BucketPlan: which gradients share a flat all-reduce buffer, where, and in which order the buffers are
// reduced. A pure function of the parameter list, the order in which their gradients are expected to
// become ready, and two caps, so every rank given the same order computes the same plan.
//
// Order. Backward produces gradients roughly in reverse registration order (the last layer's first), so
// planBuckets walks the parameters from last to first registered; planBucketsInOrder walks an observed
// ready order instead (DDP's rebuild after the first step, with rank 0's order on every rank). The walk
// fills buckets as it goes: bucket 0 holds the parameters expected ready first, is complete first, and is
// launched first. Its cap is the small `firstCapBytes`, so the first all-reduce starts early in backward.
// The last bucket holds the parameters ready last: its all-reduce has no backward left to hide behind,
// so it is small too (also `firstCapBytes`), which shortens the exposed tail. The buckets in between use
// `capBytes`.
//
// Rules. Buckets hold one dtype each. First, per dtype, the last bucket takes the parameters at the end
// of the walk, walking back from the last one while they fit in `firstCapBytes` (the last one always; alone
// if it is larger). Then the walk keeps one open bucket per dtype, and the first bucket of each dtype
// gets the first cap. A parameter that does not fit in its dtype's open bucket closes it and opens the
// next; reaching the dtype's last-bucket parameters closes it too. A parameter larger than the cap gets a
// bucket of its own. Buckets are numbered in the order the walk closes them, i.e. the order they are
// expected to become complete (the last buckets of several dtypes: the one whose final parameter comes
// earliest in the walk comes first). Inside a bucket, parameters are laid out in walk order. A `solo`
// parameter (a row-sparse gradient, reduced by rows: reducer.h) gets a bucket of its own where the walk
// reaches it: it closes its dtype's open bucket (splitting the last bucket if it lies among its
// parameters) and is closed at once; it never joins the last bucket.
// Caps are in bytes; the flags give them in MiB (2^20 bytes, as PyTorch's bucket_cap_mb), converted once
// by mibToBytes where they are parsed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/tensor/tensor.h"

namespace minidp::distributed {

/// What the plan needs to know of a parameter.
struct ParamInfo {
  std::string name;
  int64_t numel = 0;
  DType dtype = DType::F32;
  /// Gets a bucket of its own (--sparse-embedding-grad's row-sparse parameter).
  bool solo = false;
};

/// Where a parameter's gradient lives: elements [offset, offset + numel) of bucket `bucket`.
struct ParamSlot {
  int bucket = 0;
  int64_t offset = 0;
  int64_t numel = 0;
};

/// One flat all-reduce buffer.
struct Bucket {
  DType dtype = DType::F32;
  int64_t numel = 0;
  /// Registration indices of its parameters, in layout order.
  std::vector<int> params;
  size_t bytes() const { return static_cast<size_t>(numel) * dtypeSize(dtype); }
};

/// Buckets in launch order, and each parameter's slot (indexed by registration order).
struct BucketPlan {
  std::vector<Bucket> buckets;
  std::vector<ParamSlot> slots;
  std::vector<std::string> names;
  /// One line per bucket: index, dtype, bytes, parameter names.
  std::string describe() const;
};

/// MiB (2^20 bytes) as bytes, rounded to the nearest byte: the flags' unit to the plan's.
size_t mibToBytes(double mib);
/// Bytes as MiB, for reports and the flags' spelling.
double bytesToMib(size_t bytes);

/// Plans the buckets of `params` (in registration order) with caps in bytes (both > 0), walking them in
/// reverse registration order.
BucketPlan planBuckets(const std::vector<ParamInfo>& params, size_t capBytes, size_t firstCapBytes);
/// Plans the buckets walking `order`, a permutation of the registration indices of `params` (the order
/// their gradients become ready), with the same rules and caps as planBuckets.
BucketPlan planBucketsInOrder(const std::vector<ParamInfo>& params, const std::vector<int>& order, size_t capBytes,
                              size_t firstCapBytes);

/// The block of a module list a parameter belongs to: its name up to and including the first dot-separated
/// part that is a number ("h.3" of "h.3.attn.c_attn.weight", "model.layers.0", "layers.1"); empty for others.
std::string unitOf(const std::string& name);
/// ZeRO-3's plan: one bucket per unit, so that a unit's gather and its gradients' reduce-scatter use one
/// layout. A unit is a block (unitOf); a parameter outside the blocks joins the unit of the parameter
/// registered before it (the final norm and the head join the last block, which forward uses last and
/// backward first), or the first unit when none comes before it (the embeddings). Buckets in the order
/// backward completes them: the unit registered last first; inside a bucket, reverse registration order, as
/// planBuckets walks. One dtype per unit.
BucketPlan planUnits(const std::vector<ParamInfo>& params);

}  // namespace minidp::distributed
