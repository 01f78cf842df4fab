// Data-movement kernels: cpy (copy with type conversion), get_rows, concat
// and argmax.
//
// cpy walks elements in logical row-major order (ne[0] fastest), so src and
// dst may differ in shape as long as the counts match. Each thread takes a
// range of dst rows and fills each one from the runs of src elements that
// map onto it. Type conversion goes through traits(type).to_float/from_float;
// quantized types are converted a whole row at a time (blocks never straddle
// rows), and values of the same type are copied as raw bytes so that i32 and
// quantized data survive exactly.
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

struct Coord {
  int64_t i0, i1, i2, i3;
};

// The logical position of flat element k of t.
Coord unravel(const Tensor& t, int64_t k) {
  const RowIndex r = row_index(t, k / t.ne[0]);
  return {k % t.ne[0], r.i1, r.i2, r.i3};
}

// Byte offset of element i0 within a row. Quantized rows are dense blocks,
// so their offsets count blocks, not elements.
uint64_t offset_in_row(const Tensor& t, int64_t i0) {
  return is_quantized(t.type) ? row_bytes(t.type, i0) : static_cast<uint64_t>(i0) * t.nb[0];
}

// Copies n elements of `type` between rows with element strides dnb0, snb0.
void copy_run(char* d, uint64_t dnb0, const char* s, uint64_t snb0, int64_t n, DType type) {
  const uint64_t es = block_bytes(type);
  if (is_quantized(type) || (dnb0 == es && snb0 == es)) {
    std::memcpy(d, s, row_bytes(type, n));
    return;
  }
  // Strided elements (a transposed view): a fixed-size copy per element
  // compiles to one load and one store, where memcpy(.., es) is a call.
  const auto strided = [&]<size_t kSize>() {
    for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * dnb0, s + i * snb0, kSize);
  };
  switch (es) {
    case 2: strided.template operator()<2>(); break;
    case 4: strided.template operator()<4>(); break;
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * dnb0, s + i * snb0, es);
  }
}

// Converts n elements of a plain-typed row with element stride nb0 to f32.
void row_to_float(const Tensor& t, const char* p, int64_t n, float* out) {
  const DTypeTraits& tr = traits(t.type);
  if (t.nb[0] == tr.block_bytes) {
    tr.to_float(p, out, n);
  } else {
    for (int64_t i = 0; i < n; ++i) tr.to_float(p + i * t.nb[0], out + i, 1);
  }
}

// Writes n f32 values as elements of t's type at p, t's element stride apart
// (a quantized row is always dense).
void float_to_row(const Tensor& t, const float* row, int64_t n, char* p) {
  const DTypeTraits& tr = traits(t.type);
  if (tr.is_quantized || t.nb[0] == tr.block_bytes) {
    tr.from_float(row, p, n);
  } else {
    for (int64_t i = 0; i < n; ++i) tr.from_float(row + i, p + i * t.nb[0], 1);
  }
}

// Calls fn(src_coord, count, done) for the runs of src's elements that hold
// flat elements [begin, begin + n); each run lies within one row of src and
// starts `done` elements after `begin`.
template <typename Fn>
void for_each_run(const Tensor& src, int64_t begin, int64_t n, Fn&& fn) {
  Coord c = unravel(src, begin);
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(src.ne[0] - c.i0, n - done);
    fn(c, count, done);
    done += count;
    c.i0 = 0;
    if (++c.i1 == src.ne[1]) {
      c.i1 = 0;
      if (++c.i2 == src.ne[2]) {
        c.i2 = 0;
        ++c.i3;
      }
    }
  }
}

// Same type, both contiguous: one memcpy, split by bytes over the threads.
void copy_contiguous(const ComputeParams& params, const Tensor& src, Tensor& dst) {
  const uint64_t total = row_bytes(dst.type, dst.ne[0]) * static_cast<uint64_t>(dst.nrows());
  const RowRange part = split_rows(static_cast<int64_t>(total), params.ith, params.nth);
  if (part.end > part.begin) {
    std::memcpy(static_cast<char*>(dst.data) + part.begin, static_cast<const char*>(src.data) + part.begin,
                part.end - part.begin);
  }
}

}  // namespace

void op_cpy(const ComputeParams& params, Tensor& dst) {
  const Tensor& src = *dst.src[0];
  const int64_t ne0 = dst.ne[0];
  if (src.nelements() != dst.nelements() || dst.nelements() == 0) return;
  if (src.type == dst.type && src.is_contiguous() && dst.is_contiguous()) {
    copy_contiguous(params, src, dst);
    return;
  }

  // Raw bytes when the type is the same; quantized rows can only be copied
  // whole, so that needs matching row lengths.
  const bool raw = src.type == dst.type && (!is_quantized(src.type) || src.ne[0] == ne0);
  const DTypeTraits& st = traits(src.type);
  const DTypeTraits& dt = traits(dst.type);
  if (!raw && (st.to_float == nullptr || dt.from_float == nullptr)) return;  // i32 <-> float

  std::vector<float> buf(raw ? 0 : ne0);
  std::vector<float> src_row(st.is_quantized ? src.ne[0] : 0);  // last dequantized src row
  Coord cached{-1, -1, -1, -1};
  const bool dst_dense = dt.is_quantized || dst.nb[0] == dt.block_bytes;

  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex dc = row_index(dst, r);
    char* drow = dst.row(dc.i1, dc.i2, dc.i3);

    if (raw) {
      for_each_run(src, r * ne0, ne0, [&](const Coord& c, int64_t count, int64_t done) {
        copy_run(drow + offset_in_row(dst, done), dst.nb[0], src.at(0, c.i1, c.i2, c.i3) + offset_in_row(src, c.i0),
                 src.nb[0], count, src.type);
      });
      continue;
    }

    // Gather the row as f32 (straight into dst when dst is dense f32).
    float* row = (dst.type == DType::f32 && dst_dense) ? reinterpret_cast<float*>(drow) : buf.data();
    for_each_run(src, r * ne0, ne0, [&](const Coord& c, int64_t count, int64_t done) {
      const char* srow = src.row(c.i1, c.i2, c.i3);
      if (!st.is_quantized) {
        row_to_float(src, srow + c.i0 * src.nb[0], count, row + done);
        return;
      }
      if (c.i1 != cached.i1 || c.i2 != cached.i2 || c.i3 != cached.i3) {
        st.to_float(srow, src_row.data(), src.ne[0]);
        cached = c;
      }
      std::memcpy(row + done, src_row.data() + c.i0, count * sizeof(float));
    });
    if (row == reinterpret_cast<float*>(drow)) continue;
    float_to_row(dst, row, ne0, drow);
  }
}

void op_get_rows(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Tensor& ids = *dst.src[1];
  const int64_t k = dst.ne[0];
  const DTypeTraits& at = traits(a.type);
  const bool dst_dense = dst.nb[0] == sizeof(float);
  std::vector<float> buf(dst_dense ? 0 : k);

  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const auto [j, b, c] = row_index(dst, r);
    int32_t idx = 0;
    std::memcpy(&idx, ids.at(j, b % ids.ne[1], c % ids.ne[2]), sizeof idx);
    char* drow = dst.row(j, b, c);
    float* out = dst_dense ? reinterpret_cast<float*>(drow) : buf.data();

    // An index outside a is an error caught by validation; here it only
    // yields zeros, never a read outside a.
    if (idx < 0 || idx >= a.ne[1] || a.ne[0] < k) {
      std::fill(out, out + k, 0.0f);
    } else {
      const char* arow = a.row(idx, b % a.ne[2], c % a.ne[3]);
      if (a.type == DType::i32) {
        for (int64_t i = 0; i < k; ++i) {
          out[i] = static_cast<float>(*reinterpret_cast<const int32_t*>(arow + i * a.nb[0]));
        }
      } else if (at.is_quantized) {
        at.to_float(arow, out, k);
      } else {
        row_to_float(a, arow, k, out);
      }
    }
    if (!dst_dense) {
      for (int64_t i = 0; i < k; ++i) store_f32(drow + i * dst.nb[0], out[i]);
    }
  }
}

void op_set_rows(const ComputeParams& params, Tensor& dst) {
  const Tensor& src = *dst.src[0];
  const Tensor& ids = *dst.src[1];
  const int64_t k = dst.ne[0];
  std::vector<float> buf;
  const RowRange rows = split_rows(src.ne[1], params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    int32_t idx = 0;
    std::memcpy(&idx, ids.at(r), sizeof idx);
    if (idx < 0 || idx >= dst.ne[1]) continue;  // memory safety; validation cannot see values
    const float* row = reinterpret_cast<const float*>(src.row(r));
    if (src.nb[0] != sizeof(float)) {
      buf.resize(static_cast<size_t>(k));
      for (int64_t i = 0; i < k; ++i) buf[i] = load_f32(src.at(i, r));
      row = buf.data();
    }
    float_to_row(dst, row, k, dst.row(idx));  // a transposed dst takes the row as a column
  }
}

void op_concat(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Tensor& b = *dst.src[1];
  const int dim = dst.param<int32_t>(0);
  if (dim < 0 || dim >= kMaxDims) return;

  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const auto [i1, i2, i3] = row_index(dst, r);
    char* drow = dst.row(i1, i2, i3);
    if (dim == 0) {
      copy_run(drow, dst.nb[0], a.row(i1, i2, i3), a.nb[0], a.ne[0], dst.type);
      copy_run(drow + offset_in_row(dst, a.ne[0]), dst.nb[0], b.row(i1, i2, i3), b.nb[0], b.ne[0], dst.type);
      continue;
    }
    // The whole row comes from a or from b, by its coordinate along dim.
    int64_t i[kMaxDims] = {0, i1, i2, i3};
    const Tensor* s = &a;
    if (i[dim] >= a.ne[dim]) {
      i[dim] -= a.ne[dim];
      s = &b;
    }
    copy_run(drow, dst.nb[0], s->row(i[1], i[2], i[3]), s->nb[0], dst.ne[0], dst.type);
  }
}

void op_argmax(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const int64_t n = a.ne[0];
  const RowRange rows = split_rows(a.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const auto [i1, i2, i3] = row_index(a, r);
    const char* arow = a.row(i1, i2, i3);
    int32_t best = 0;
    float best_v = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
      const float v = load_f32(arow + i * a.nb[0]);
      // Strictly greater: the first of equal maxima wins, and NaN never does
      // (as a greedy Sampler counts it); a row of -inf and NaN gives 0.
      if (v > best_v) {
        best_v = v;
        best = static_cast<int32_t>(i);
      }
    }
    // The result holds one value per row of a: [ne1, ne2, ne3].
    *reinterpret_cast<int32_t*>(dst.at(i1, i2, i3)) = best;
  }
}

}  // namespace tensorpc::cpu
