#include "framework/distributed/gradient/bucket_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace minidp::distributed {

size_t mibToBytes(double mib) { return static_cast<size_t>(std::llround(mib * 1048576.0)); }

double bytesToMib(size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

BucketPlan planBuckets(const std::vector<ParamInfo>& params, size_t capBytes, size_t firstCapBytes) {
  std::vector<int> order(params.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(params.size() - 1 - k);
  return planBucketsInOrder(params, order, capBytes, firstCapBytes);
}

BucketPlan planBucketsInOrder(const std::vector<ParamInfo>& params, const std::vector<int>& order, size_t capBytes,
                              size_t firstCapBytes) {
  MINIDP_CHECK(capBytes > 0 && firstCapBytes > 0,
               "bucket caps must be positive, got " << capBytes << " and " << firstCapBytes << " bytes");
  MINIDP_CHECK(order.size() == params.size(),
               "bucket order of " << order.size() << " parameters, got " << params.size());
  std::vector<int> position(params.size(), -1);  // of each parameter in `order`
  for (size_t k = 0; k < order.size(); ++k) {
    const int i = order[k];
    MINIDP_CHECK(
        i >= 0 && static_cast<size_t>(i) < params.size() && position[i] < 0,
        "bucket order is not a permutation of the " << params.size() << " parameters: entry " << k << " is " << i);
    position[i] = static_cast<int>(k);
  }
  BucketPlan plan;
  plan.slots.resize(params.size());
  for (const ParamInfo& p : params) plan.names.push_back(p.name);

  // The last bucket of each dtype: the end of the walk, back from its last parameter up to the first cap.
  std::vector<bool> inLast(params.size(), false);
  std::map<DType, size_t> lastBytes;
  std::map<DType, bool> lastFull;
  for (auto k = order.rbegin(); k != order.rend(); ++k) {
    const ParamInfo& p = params[*k];
    MINIDP_CHECK(p.dtype != DType::I32, "parameter '" << p.name << "' is int32; gradients are float");
    MINIDP_CHECK(p.numel > 0, "parameter '" << p.name << "' has no elements");
    if (p.solo) continue;
    const size_t bytes = static_cast<size_t>(p.numel) * dtypeSize(p.dtype);
    size_t& taken = lastBytes[p.dtype];
    bool& full = lastFull[p.dtype];
    if (full || (taken > 0 && taken + bytes > firstCapBytes)) {
      full = true;
      continue;
    }
    inLast[*k] = true;
    taken += bytes;
  }

  struct Open {
    Bucket bucket;
    size_t cap;
    bool last = false;  // the dtype's last bucket: its members are fixed, no cap applies
  };
  std::map<DType, Open> open;  // the open bucket of each dtype
  const auto close = [&](DType dtype) {
    Bucket& b = open.at(dtype).bucket;
    const int index = static_cast<int>(plan.buckets.size());
    for (int p : b.params) plan.slots[p].bucket = index;
    plan.buckets.push_back(std::move(b));
    open.at(dtype) = Open{Bucket{dtype, 0, {}}, capBytes};
  };
  for (const int i : order) {
    const ParamInfo& p = params[i];
    auto it = open.find(p.dtype);
    if (it == open.end()) it = open.emplace(p.dtype, Open{Bucket{p.dtype, 0, {}}, firstCapBytes}).first;
    const size_t bytes = static_cast<size_t>(p.numel) * dtypeSize(p.dtype);
    if (p.solo) {
      const bool last = it->second.last;
      if (!it->second.bucket.params.empty()) close(p.dtype);
      plan.slots[i] = ParamSlot{0, 0, p.numel};
      it->second.bucket = Bucket{p.dtype, p.numel, {i}};
      close(p.dtype);
      it->second.last = last;  // the last bucket's remaining parameters still form one
      continue;
    }
    if (inLast[i] && !it->second.last) {
      if (!it->second.bucket.params.empty()) close(p.dtype);
      it->second.last = true;
    } else if (!inLast[i] && !it->second.bucket.params.empty() && it->second.bucket.bytes() + bytes > it->second.cap) {
      close(p.dtype);
    }
    Bucket& b = it->second.bucket;
    plan.slots[i] = ParamSlot{0, b.numel, p.numel};
    b.params.push_back(i);
    b.numel += p.numel;
    if (!inLast[i] && b.bytes() >= it->second.cap) close(p.dtype);  // full, or one oversized parameter alone
  }
  // What is still open is each dtype's last bucket; they close in the order they become complete: the
  // one whose final parameter comes earliest in the walk is complete first.
  std::vector<std::pair<int, DType>> remaining;
  for (auto& [dtype, o] : open) {
    if (!o.bucket.params.empty()) remaining.emplace_back(position[o.bucket.params.back()], dtype);
  }
  std::sort(remaining.begin(), remaining.end());
  for (auto& [key, dtype] : remaining) close(dtype);
  return plan;
}

std::string BucketPlan::describe() const {
  std::ostringstream os;
  size_t total = 0;
  for (const Bucket& b : buckets) total += b.bytes();
  os << "bucket plan: " << buckets.size() << " bucket(s), " << total << " bytes, launched in index order\n";
  for (size_t i = 0; i < buckets.size(); ++i) {
    const Bucket& b = buckets[i];
    os << "  bucket " << i << ": " << dtypeName(b.dtype) << ", " << b.bytes() << " bytes, " << b.params.size()
       << " parameter(s):";
    for (int p : b.params) os << " " << names[p];
    os << "\n";
  }
  return os.str();
}

std::string unitOf(const std::string& name) {
  size_t start = 0;
  while (start < name.size()) {
    const size_t end = std::min(name.find('.', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos) return name.substr(0, end);
    start = end + 1;
  }
  return {};
}

BucketPlan planUnits(const std::vector<ParamInfo>& params) {
  BucketPlan plan;
  plan.slots.resize(params.size());
  for (const ParamInfo& p : params) plan.names.push_back(p.name);
  // Units in registration order: a block starts one; other parameters join the current one.
  std::vector<int> unit(params.size(), 0);
  std::string block;
  int units = 1;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string name = unitOf(params[i].name);
    if (!name.empty() && name != block) {
      if (!block.empty() || i > 0) ++units;  // the first block starts unit 0 when nothing comes before it
      block = name;
    }
    unit[i] = units - 1;
  }
  for (int u = units - 1; u >= 0; --u) {
    Bucket b;
    for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
      if (unit[i] != u) continue;
      const ParamInfo& p = params[i];
      MINIDP_CHECK(b.params.empty() || p.dtype == b.dtype, "ZeRO-3 unit of '" << p.name << "' mixes "
                                                                              << dtypeName(b.dtype) << " and "
                                                                              << dtypeName(p.dtype));
      b.dtype = p.dtype;
      plan.slots[i] = ParamSlot{static_cast<int>(plan.buckets.size()), b.numel, p.numel};
      b.params.push_back(i);
      b.numel += p.numel;
    }
    plan.buckets.push_back(std::move(b));
  }
  return plan;
}

}  // namespace minidp::distributed
