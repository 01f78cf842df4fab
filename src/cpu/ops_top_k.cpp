// top_k: the k largest values of each row and their indices; top_k_ids: the
// indices alone, as i32, in the same order (op.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

// The total order of top_k — larger values first, NaN below every number
// (-inf included), equal values (-0 and +0 among them) by the lower index —
// as one unsigned integer per element, larger ranking higher: the value's
// bits made monotonic in the high half, the complemented index in the low.
uint64_t rank_key(float value, int64_t index) {
  uint32_t order = 0;  // NaN
  if (!std::isnan(value)) {
    value += 0.0f;  // -0 becomes +0
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    // Negative: all bits flipped; positive: the sign bit set. Without a branch,
    // which random signs would mispredict half the time. Never 0 (a NaN's bits).
    const uint32_t flip = (0u - (bits >> 31)) | 0x80000000u;
    order = bits ^ flip;
  }
  return (static_cast<uint64_t>(order) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(index));
}

int32_t index_of(uint64_t key) { return static_cast<int32_t>(~static_cast<uint32_t>(key)); }

// Calls emit(c, j, index) for j < k, best first, with the index of each of
// the k highest-ranked elements of every row c of a that thread ith takes.
template <typename Emit>
void for_each_top_k(const ComputeParams& params, const Tensor& a, size_t k, Emit&& emit) {
  const int64_t n = a.ne[0];
  // Candidates gather in a buffer of 2k; when it fills, the k that rank
  // highest stay (nth_element) and the lowest of them becomes the floor, which
  // a later element must rank above to enter. Most of a row is turned away by
  // that one comparison, and a candidate costs O(1) on average.
  std::vector<uint64_t> kept;
  kept.reserve(2 * k);
  const auto keep_best = [&] {
    if (kept.size() <= k) return;
    std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(k - 1), kept.end(),
                     std::greater<uint64_t>());
    kept.resize(k);
  };
  const RowRange rows = split_rows(a.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex c = row_index(a, r);
    const char* arow = a.row(c.i1, c.i2, c.i3);
    kept.clear();
    uint64_t floor = 0;  // every key is above it until the buffer first fills
    // The floor's value, once it is a number: a value below it (or NaN) is
    // turned away without making its key.
    float floor_value = -std::numeric_limits<float>::infinity();
    const auto offer = [&](float value, int64_t i) {
      const uint64_t key = rank_key(value, i);
      if (key <= floor) return;
      kept.push_back(key);
      if (kept.size() < 2 * k) return;
      keep_best();
      floor = kept[k - 1];  // the k-th: the lowest kept
      const float v = load_f32(arow + index_of(floor) * a.nb[0]);
      if (!std::isnan(v)) floor_value = v;
    };
    if (a.type == DType::f32 && a.nb[0] == sizeof(float)) {
      const auto* values = reinterpret_cast<const float*>(arow);
      for (int64_t i = 0; i < n; ++i) {
        if (values[i] >= floor_value || floor == 0) offer(values[i], i);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) offer(load_f32(arow + i * a.nb[0]), i);
    }
    keep_best();
    std::sort(kept.begin(), kept.end(), std::greater<uint64_t>());  // best first
    for (size_t j = 0; j < k; ++j) emit(c, j, index_of(kept[j]));
  }
}

}  // namespace

void op_top_k(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  // Row 0 of the result's [k, 2] block holds the values, row 1 the indices.
  for_each_top_k(params, a, static_cast<size_t>(dst.ne[0]), [&](const RowIndex& c, size_t j, int32_t index) {
    const char* arow = a.row(c.i1, c.i2, c.i3);
    store_f32(dst.at(static_cast<int64_t>(j), 0, c.i1, c.i2), load_f32(arow + index * a.nb[0]));
    store_f32(dst.at(static_cast<int64_t>(j), 1, c.i1, c.i2), static_cast<float>(index));
  });
}

void op_top_k_ids(const ComputeParams& params, Tensor& dst) {
  for_each_top_k(params, *dst.src[0], static_cast<size_t>(dst.ne[0]), [&](const RowIndex& c, size_t j, int32_t index) {
    std::memcpy(dst.at(static_cast<int64_t>(j), c.i1, c.i2, c.i3), &index, sizeof index);
  });
}

}  // namespace tensorpc::cpu
