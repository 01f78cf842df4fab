// Tensor: a descriptor of up to four dimensions that points at bytes it does
// not own.
//
// Conventions are GGUF/ggml's: ne[0] is the innermost, contiguous dim; nb[i]
// is the byte stride of dim i. A tensor is either a leaf (op == Op::none: a
// weight or an input) or the result of an op on its sources. Views share the
// bytes of view_src at view_offset. Bytes live in a Buffer of some device;
// `buffer`/`offset` say where, and `data` is the host address when the buffer
// is host-addressable (null otherwise).
//
// Tensors are created by a Context (context.h), which owns the descriptors.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "tensorpc/dtype.h"
#include "tensorpc/op.h"

namespace tensorpc {

class Buffer;

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSources = 3;
inline constexpr int kMaxParams = 8;

// Roles a graph gives a tensor, used by allocators and schedulers.
enum TensorFlag : uint32_t {
  kFlagInput = 1u << 0,   // set by the caller before each compute
  kFlagOutput = 1u << 1,  // read by the caller after compute; never reused
  kFlagWeight = 1u << 2,  // a parameter of the model; lives in a weight buffer
};

struct Tensor {
  DType type = DType::f32;
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};
  std::array<uint64_t, kMaxDims> nb{0, 0, 0, 0};

  Op op = Op::none;
  std::array<int32_t, kMaxParams> params{};  // op parameters, see op.h
  std::array<Tensor*, kMaxSources> src{};

  Tensor* view_src = nullptr;  // the tensor whose bytes a view shares
  uint64_t view_offset = 0;    // byte offset into view_src

  Buffer* buffer = nullptr;  // where the bytes live (null: not placed yet)
  uint64_t offset = 0;       // byte offset of element 0 within buffer
  void* data = nullptr;      // host address of element 0, when host-addressable

  uint32_t flags = 0;
  std::string name;

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes spanned from element 0 to one past the last element.
  uint64_t nbytes() const;
  // Bytes one row of ne[0] elements takes.
  uint64_t row_size() const { return row_bytes(type, ne[0]); }
  // True when the elements are laid out densely in order.
  bool is_contiguous() const;
  // True when rows are dense (nb[0] is the element size) though rows may be strided.
  bool rows_are_contiguous() const;
  bool is_view() const { return view_src != nullptr; }
  int n_dims() const;  // 1 + index of the last dim > 1 (at least 1)

  template <typename T>
  T param(int i) const {
    static_assert(sizeof(T) == 4);
    T v;
    __builtin_memcpy(&v, &params[i], 4);
    return v;
  }
  template <typename T>
  void set_param(int i, T v) {
    static_assert(sizeof(T) == 4);
    __builtin_memcpy(&params[i], &v, 4);
  }

  // Address of element (i0,i1,i2,i3) in host memory; requires data != null.
  char* at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<char*>(data) + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }
  char* row(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const { return at(0, i1, i2, i3); }
};

// "[4096, 32, 1, 1] f32" — for error messages and debug prints.
std::string describe(const Tensor& t);
// True when a and b have the same ne.
bool same_shape(const Tensor& a, const Tensor& b);

}  // namespace tensorpc
