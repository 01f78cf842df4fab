#include "tensorpc/tensor.h"

#include <string>

namespace tensorpc {

uint64_t Tensor::nbytes() const {
  for (int i = 0; i < kMaxDims; ++i) {
    if (ne[i] <= 0) return 0;
  }
  // Span of the last element plus its size; for blocks, ne[0] counts blocks.
  const int64_t bs = block_size(type);
  uint64_t bytes = block_bytes(type);
  bytes += static_cast<uint64_t>(ne[0] / bs - 1) * nb[0];
  for (int i = 1; i < kMaxDims; ++i) bytes += static_cast<uint64_t>(ne[i] - 1) * nb[i];
  return bytes;
}

bool Tensor::is_contiguous() const {
  uint64_t expected = block_bytes(type);
  if (nb[0] != expected) return false;
  expected = row_bytes(type, ne[0]);
  for (int i = 1; i < kMaxDims; ++i) {
    if (ne[i] != 1 && nb[i] != expected) return false;
    expected *= static_cast<uint64_t>(ne[i]);
  }
  return true;
}

bool Tensor::rows_are_contiguous() const { return nb[0] == block_bytes(type); }

int Tensor::n_dims() const {
  for (int i = kMaxDims - 1; i > 0; --i) {
    if (ne[i] > 1) return i + 1;
  }
  return 1;
}

std::string describe(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < kMaxDims; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.ne[i]);
  }
  s += "] ";
  s += name_of(t.type);
  if (!t.name.empty()) s += " '" + t.name + "'";
  return s;
}

bool same_shape(const Tensor& a, const Tensor& b) { return a.ne == b.ne; }

}  // namespace tensorpc
