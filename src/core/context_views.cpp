// Views: new descriptors over the bytes of an existing tensor.
#include <string>

#include "tensorpc/context.h"

namespace tensorpc {
namespace {

[[noreturn]] void fail(Op op, const std::string& what) {
  throw Error(invalid_argument(std::string(name_of(op)) + ": " + what));
}

}  // namespace

// A descriptor sharing a's bytes. view_src always names the tensor that owns
// the bytes (never another view), so liveness and placement look one step.
Tensor* Context::make_view(Tensor* a, Op op) {
  if (a == nullptr) fail(op, "source is null");
  Tensor& t = tensors_.emplace_back();
  t.type = a->type;
  t.ne = a->ne;
  t.nb = a->nb;
  t.op = op;
  t.src[0] = a;
  t.view_src = a->view_src ? a->view_src : a;
  t.view_offset = a->view_src ? a->view_offset : 0;
  if (a->buffer) {  // a view of a placed tensor is placed too
    t.buffer = a->buffer;
    t.offset = a->offset;
    t.data = a->data;
  }
  return &t;
}

Tensor* Context::view(Tensor* a, std::initializer_list<int64_t> ne, std::initializer_list<uint64_t> nb,
                      uint64_t offset) {
  const Op op = Op::view;
  if (a == nullptr) fail(op, "source is null");
  if (ne.size() < 1 || ne.size() > kMaxDims || nb.size() != ne.size()) {
    fail(op, "ne and nb need the same number of dims, 1 to 4");
  }
  Tensor probe;
  probe.type = a->type;
  int i = 0;
  for (int64_t n : ne) {
    if (n < 0) fail(op, "negative dim " + std::to_string(n));
    probe.ne[i++] = n;
  }
  i = 0;
  for (uint64_t s : nb) probe.nb[i++] = s;
  for (; i < kMaxDims; ++i) probe.nb[i] = probe.nb[i - 1] * static_cast<uint64_t>(probe.ne[i - 1]);
  if (probe.ne[0] % block_size(a->type) != 0) fail(op, "ne[0] is not a whole number of blocks");
  if (probe.nb[0] != block_bytes(a->type)) fail(op, "nb[0] must be the element (block) size of " + describe(*a));
  const size_t align = storage_alignment(a->type);
  for (uint64_t s : probe.nb) {
    if (s % align != 0) fail(op, "stride " + std::to_string(s) + " is not a multiple of the alignment " + std::to_string(align));
  }
  if ((a->view_offset + offset) % align != 0) {
    fail(op, "offset " + std::to_string(offset) + " is not a multiple of the alignment " + std::to_string(align));
  }
  const uint64_t end = offset + probe.nbytes();
  if (end < offset || end > a->nbytes()) {
    fail(op, "a view of " + describe(*a) + " at offset " + std::to_string(offset) + " spanning " +
                 std::to_string(probe.nbytes()) + " bytes lies outside its " + std::to_string(a->nbytes()) + " bytes");
  }
  Tensor* t = make_view(a, op);
  t->ne = probe.ne;
  t->nb = probe.nb;
  t->view_offset += offset;
  if (t->data) t->data = static_cast<char*>(t->data) + offset;
  if (t->buffer) t->offset += offset;
  return t;
}

Tensor* Context::reshape(Tensor* a, std::initializer_list<int64_t> ne) {
  const Op op = Op::reshape;
  if (a == nullptr) fail(op, "source is null");
  if (ne.size() < 1 || ne.size() > kMaxDims) fail(op, "a shape has 1 to 4 dims");
  if (!a->is_contiguous()) fail(op, describe(*a) + " is not contiguous; cont() it first");
  std::array<int64_t, kMaxDims> shape{1, 1, 1, 1};
  int64_t count = 1;
  int i = 0;
  for (int64_t n : ne) {
    if (n < 0) fail(op, "negative dim " + std::to_string(n));
    shape[i++] = n;
    count *= n;
  }
  if (count != a->nelements()) {
    fail(op, describe(*a) + " has " + std::to_string(a->nelements()) + " elements, the new shape " +
                 std::to_string(count));
  }
  if (shape[0] % block_size(a->type) != 0) fail(op, "ne[0] is not a whole number of blocks");
  Tensor* t = make_view(a, op);
  t->ne = shape;
  t->nb[0] = block_bytes(a->type);
  t->nb[1] = row_bytes(a->type, shape[0]);
  for (int d = 2; d < kMaxDims; ++d) t->nb[d] = t->nb[d - 1] * static_cast<uint64_t>(shape[d - 1]);
  return t;
}

Tensor* Context::permute(Tensor* a, int ax0, int ax1, int ax2, int ax3) {
  const Op op = Op::permute;
  if (a == nullptr) fail(op, "source is null");
  const int axes[kMaxDims] = {ax0, ax1, ax2, ax3};
  bool seen[kMaxDims] = {};
  for (int ax : axes) {
    if (ax < 0 || ax >= kMaxDims || seen[ax]) {
      fail(op, "axes (" + std::to_string(ax0) + ", " + std::to_string(ax1) + ", " + std::to_string(ax2) + ", " +
                   std::to_string(ax3) + ") are not a permutation of 0..3");
    }
    seen[ax] = true;
  }
  if (is_quantized(a->type) && axes[0] != 0) fail(op, "a quantized tensor keeps dim 0 in place");
  Tensor* t = make_view(a, op);
  for (int i = 0; i < kMaxDims; ++i) {
    t->ne[axes[i]] = a->ne[i];
    t->nb[axes[i]] = a->nb[i];
    t->params[i] = axes[i];
  }
  return t;
}

Tensor* Context::transpose(Tensor* a) {
  if (a == nullptr) fail(Op::transpose, "source is null");
  if (is_quantized(a->type)) fail(Op::transpose, describe(*a) + ": a quantized tensor cannot be transposed");
  Tensor* t = permute(a, 1, 0, 2, 3);
  t->op = Op::transpose;
  return t;
}

}  // namespace tensorpc
