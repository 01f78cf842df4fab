// top_k: the k largest values of each row and their indices (op.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

struct Ranked {
  float value;
  int32_t index;
};

// The total order of top_k: larger values first, NaN below every number,
// equal values by the lower index.
bool ranks_above(const Ranked& a, const Ranked& b) {
  const bool a_nan = std::isnan(a.value);
  const bool b_nan = std::isnan(b.value);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.value != b.value) return a.value > b.value;
  return a.index < b.index;
}

}  // namespace

void op_top_k(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const int64_t n = a.ne[0];
  const auto k = static_cast<size_t>(dst.ne[0]);
  std::vector<Ranked> kept;  // a heap whose front ranks lowest, once k are kept
  kept.reserve(k);
  const RowRange rows = split_rows(a.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const auto [i1, i2, i3] = row_index(a, r);
    const char* arow = a.row(i1, i2, i3);
    kept.clear();
    // Once k are kept and the lowest of them is a number, a candidate enters
    // only if it is larger: an equal value comes at a higher index, and NaN
    // ranks below every number. Most of a row is turned away by that one
    // comparison.
    float floor = 0.0f;
    bool have_floor = false;
    const auto offer = [&](float value, int64_t i) {
      if (have_floor && !(value > floor)) return;
      const Ranked c{value, static_cast<int32_t>(i)};
      if (kept.size() < k) {
        kept.push_back(c);
        std::push_heap(kept.begin(), kept.end(), ranks_above);
      } else if (ranks_above(c, kept.front())) {
        std::pop_heap(kept.begin(), kept.end(), ranks_above);
        kept.back() = c;
        std::push_heap(kept.begin(), kept.end(), ranks_above);
      } else {
        return;
      }
      have_floor = kept.size() == k && !std::isnan(kept.front().value);
      floor = kept.front().value;
    };
    if (a.type == DType::f32 && a.nb[0] == sizeof(float)) {
      const auto* values = reinterpret_cast<const float*>(arow);
      for (int64_t i = 0; i < n; ++i) {
        if (!have_floor || values[i] > floor) offer(values[i], i);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) offer(load_f32(arow + i * a.nb[0]), i);
    }
    std::sort_heap(kept.begin(), kept.end(), ranks_above);  // best first
    // Row 0 of the result's [k, 2] block holds the values, row 1 the indices.
    char* values = dst.row(0, i1, i2);
    char* indices = dst.row(1, i1, i2);
    for (size_t j = 0; j < k; ++j) {
      *reinterpret_cast<float*>(values + j * dst.nb[0]) = kept[j].value;
      *reinterpret_cast<float*>(indices + j * dst.nb[0]) = static_cast<float>(kept[j].index);
    }
  }
}

}  // namespace tensorpc::cpu
