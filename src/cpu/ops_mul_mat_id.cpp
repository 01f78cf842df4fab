// mul_mat_id on the CPU: dst [M, k, T], row (s, t) = expert ids[s, t] of
// a [K, M, E] times b's row (n_b == 1 ? 0 : s, t), b [K, n_b, T] (op.h).
//
// Every thread first makes its own plan from ids, in its scratch slot: the
// (slot, token) pairs whose id is in [0, E), sorted by expert and then by
// pair, and the segments of that order, one per chosen expert. A pair whose
// id is outside [0, E) gets a row of zeros; no weight is read for it.
// The weights are multiplied with the table's gemm kernels against b in
// their vec-dot type, as mul_mat does (mul_mat_common.h). Then:
//
// Decode (fewer than kDecodeTokens tokens): b is converted as mul_mat
// converts it (every thread all of it, into its own slot, for at most four
// rows; else shared, behind a barrier). The chosen experts' weight rows,
// one expert after another (U chosen experts x M rows), are read by parts
// (run_by_parts, in pieces that start at multiples of kRowAlign of their
// expert's rows): each chosen expert's weights stream from memory once,
// split over the threads, and no other expert's are touched. An expert one
// pair chose computes straight into that pair's dst row; the rows of one
// that several chose are copied next to each other in the thread's slot,
// multiplied at once and the results scattered into their dst rows.
//
// Prefill: the threads convert each chosen pair's row of b into shared
// scratch in plan order, so that an expert's rows lie together, meet at the
// barrier, and then take (expert, block of its pairs, block of weight rows)
// items in turn: one gemm per item into the thread's slot, scattered into
// the pairs' dst rows.
//
// Scratch is sized by the node's shape alone (work_size runs before ids
// have values): the plan and the gathered rows for all k * T pairs.
#include <algorithm>
#include <cstring>

#include "cpu/mul_mat_common.h"

namespace tensorpc::cpu {
namespace {

// Fewer tokens than this are a decode step (mul_mat's N < 8).
constexpr int64_t kDecodeTokens = 8;
// One gemm call's block: at most this many weight rows by this many pairs,
// its result in the thread's slot.
constexpr int64_t kBlockRows = 3 * kRowAlign;
constexpr int64_t kBlockPairs = 256;
// Scratch sizes that would not fit any memory saturate here, so that the
// device refuses the graph (out of memory) instead of wrapping around.
constexpr size_t kTooMuch = size_t{1} << 62;

size_t mul_sat(size_t a, size_t b) {
  size_t r;
  return __builtin_mul_overflow(a, b, &r) || r > kTooMuch ? kTooMuch : r;
}
size_t add_sat(size_t a, size_t b) { return a > kTooMuch - std::min(b, kTooMuch) ? kTooMuch : a + b; }
size_t round64(size_t n) { return n >= kTooMuch ? kTooMuch : (n + 63) / 64 * 64; }

// One chosen expert's run of the plan: pairs [start, next segment's start).
struct Segment {
  int64_t expert;
  int64_t start;
  int64_t first_item;  // prefill: the first of its work items
};

struct Shape {
  int64_t K, M, E, k, T, n_b;
  int64_t pairs() const { return k * T; }
  bool decode() const { return T < kDecodeTokens; }
};

Shape shape_of(const Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Tensor& b = *dst.src[1];
  const Tensor& ids = *dst.src[2];
  return {a.ne[0], a.ne[1], a.ne[2], ids.ne[0], ids.ne[1], b.ne[1]};
}

// Where the node's scratch goes. A slot per thread holds its plan (keys,
// then segments), at decode the converted b when every thread converts it
// (first) and the rows gathered for one expert, and the result block of one
// gemm. Shared scratch, before the slots: the converted b at decode when
// the threads share the work, the rows of every pair in plan order at
// prefill.
struct Layout {
  bool convert = false;             // decode: b needs converting
  bool convert_per_thread = false;  // decode: into every thread's slot
  bool per_thread = false;          // Scratch::per_thread: no shared part
  size_t shared = 0;                // bytes before the slots
  size_t own_b = 0;                 // decode, per thread: converted b at the slot's start
  size_t plan = 0;                  // keys and segments
  size_t gathered = 0;              // decode: one block of pairs' rows
  size_t block = 0;                 // one gemm's result block
  size_t slot = 0;                  // all of the above, in whole cache lines
};

Layout layout_of(const Tensor& dst) {
  const Shape s = shape_of(dst);
  const DType weights = dst.src[0]->type;
  const Tensor& b = *dst.src[1];
  const auto pairs = static_cast<size_t>(s.pairs());
  const size_t vrow = row_bytes(vec_dot_type(weights), s.K);
  const auto block_pairs = static_cast<size_t>(std::min<int64_t>(s.pairs(), kBlockPairs));
  const auto block_rows = static_cast<size_t>(std::min<int64_t>(s.M, kBlockRows));
  Layout l;
  // A pair's index must fit the low half of a plan key.
  l.plan = s.pairs() > INT32_MAX
               ? kTooMuch
               : round64(add_sat(mul_sat(pairs, sizeof(uint64_t)), mul_sat(pairs + 1, sizeof(Segment))));
  l.block = round64(mul_sat(mul_sat(block_rows, block_pairs), sizeof(float)));
  if (s.decode()) {
    l.convert = b_needs_conversion(weights, b);
    l.convert_per_thread = l.convert && converts_per_thread(b);
    const size_t converted = round64(converted_bytes(weights, b));
    if (l.convert_per_thread) {
      l.own_b = converted;
    } else if (l.convert) {
      l.shared = converted;
    }
    l.gathered = round64(mul_sat(block_pairs, vrow));
  } else {
    l.shared = round64(mul_sat(pairs, vrow));
  }
  l.per_thread = s.decode() && (!l.convert || l.convert_per_thread);
  l.slot = add_sat(add_sat(add_sat(l.own_b, l.plan), l.gathered), l.block);
  return l;
}

int32_t id_at(const Tensor& ids, int64_t s, int64_t t) {
  int32_t id;
  std::memcpy(&id, ids.at(s, t), sizeof id);
  return id;
}

// What every part of the kernel reads.
struct Job {
  const Tensor& a;
  const Tensor& b;
  const Tensor& ids;
  Tensor& dst;
  Shape s;
  GemmFn gemm;
  DType vtype;
  size_t vrow;
  const uint64_t* keys;  // the plan: (expert << 32) | pair, sorted
  const Segment* segments;
  int64_t n_used;  // chosen experts: segments[0, n_used), then an end marker

  int64_t pair_at(int64_t q) const { return static_cast<int64_t>(keys[q] & 0xffffffffu); }
  int64_t count(int64_t u) const { return segments[u + 1].start - segments[u].start; }
  float* dst_row(int64_t pair) const { return reinterpret_cast<float*>(dst.row(pair % s.k, pair / s.k)); }
  // b's row (j, t) of a pair: j = n_b == 1 ? 0 : its slot.
  int64_t b_slot(int64_t pair) const { return s.n_b == 1 ? 0 : pair % s.k; }

  // Weight rows [m0, m1) of expert e times the n activation rows at B (vrow
  // bytes apart), which belong to the pairs at plan positions [q0, q0 + n):
  // into their dst rows, through `block` (rows x n floats) when n > 1.
  void multiply(int64_t e, int64_t m0, int64_t m1, const char* B, int64_t q0, int64_t n, float* block) const {
    const char* A = a.row(m0, e);
    if (n == 1) {
      gemm(s.K, m1 - m0, 1, A, a.nb[1], B, vrow, dst_row(pair_at(q0)) + m0, 1);
      return;
    }
    const int64_t rows = m1 - m0;
    gemm(s.K, rows, n, A, a.nb[1], B, vrow, block, static_cast<size_t>(rows));
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(dst_row(pair_at(q0 + j)) + m0, block + j * rows, sizeof(float) * static_cast<size_t>(rows));
    }
  }
};

// The plan of the pairs with ids in [0, E): keys sorted, their segments, and
// how many experts were chosen.
int64_t make_plan(const Tensor& ids, const Shape& s, uint64_t* keys, Segment* segments) {
  int64_t n = 0;
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t slot = 0; slot < s.k; ++slot) {
      const int32_t id = id_at(ids, slot, t);
      if (id < 0 || id >= s.E) continue;
      keys[n++] = (static_cast<uint64_t>(id) << 32) | static_cast<uint64_t>(slot + s.k * t);
    }
  }
  std::sort(keys, keys + n);
  int64_t used = 0;
  for (int64_t q = 0; q < n; ++q) {
    const auto expert = static_cast<int64_t>(keys[q] >> 32);
    if (q == 0 || expert != segments[used - 1].expert) segments[used++] = {expert, q, 0};
  }
  segments[used] = {-1, n, 0};
  return used;
}

// Zeros for this thread's share of the pairs whose id is not an expert (all
// pairs when K is 0: a sum of nothing).
void zero_unchosen_rows(const ComputeParams& p, const Job& job) {
  const RowRange r = split_rows(job.s.pairs(), p.ith, p.nth);
  for (int64_t pair = r.begin; pair < r.end; ++pair) {
    const int32_t id = id_at(job.ids, pair % job.s.k, pair / job.s.k);
    if (job.s.K == 0 || id < 0 || id >= job.s.E) {
      std::memset(job.dst_row(pair), 0, sizeof(float) * static_cast<size_t>(job.s.M));
    }
  }
}

void run_decode(const ComputeParams& p, const Job& job, const Layout& l, char* slot) {
  const Shape& s = job.s;
  // b's rows in the vec-dot type, as mul_mat lays them out: row (j, t) at j + n_b * t.
  const char* converted = nullptr;
  if (l.convert) {
    char* out = l.convert_per_thread ? slot : static_cast<char*>(p.wdata);
    convert_b(p, job.a.type, job.b, out, l.convert_per_thread);
    converted = out;
  }
  const auto b_row = [&](int64_t pair) -> const char* {
    const int64_t j = job.b_slot(pair), t = pair / s.k;
    return converted ? converted + static_cast<size_t>(j + s.n_b * t) * job.vrow : job.b.row(j, t);
  };
  char* gathered = slot + l.own_b + l.plan;
  auto* block = reinterpret_cast<float*>(gathered + l.gathered);

  // The chosen experts' rows one after another, each expert's run padded to
  // a multiple of kRowAlign so that every piece starts at such a row of its
  // expert (the padding rows compute nothing).
  const int64_t padded = round_up(s.M, kRowAlign);
  const auto run_rows = [&](int64_t v0, int64_t v1) {
    for (int64_t u = v0 / padded; u * padded < v1; ++u) {
      const int64_t m0 = std::max(v0, u * padded) - u * padded;
      const int64_t m1 = std::min({v1 - u * padded, padded, s.M});
      if (m0 >= m1) continue;
      const Segment& seg = job.segments[u];
      const int64_t count = job.count(u);
      if (count == 1) {
        job.multiply(seg.expert, m0, m1, b_row(job.pair_at(seg.start)), seg.start, 1, nullptr);
        continue;
      }
      for (int64_t j0 = 0; j0 < count; j0 += kBlockPairs) {
        const int64_t n = std::min(kBlockPairs, count - j0);
        for (int64_t j = 0; j < n; ++j) {
          std::memcpy(gathered + static_cast<size_t>(j) * job.vrow, b_row(job.pair_at(seg.start + j0 + j)), job.vrow);
        }
        for (int64_t r0 = m0; r0 < m1; r0 += kBlockRows) {
          job.multiply(seg.expert, r0, std::min(m1, r0 + kBlockRows), gathered, seg.start + j0, n, block);
        }
      }
    }
  };
  run_by_parts(p, job.n_used * padded, run_rows, kRowAlign);
}

void run_prefill(const ComputeParams& p, const Job& job, const Layout& l, char* slot, Segment* segments) {
  const Shape& s = job.s;
  const int64_t n_valid = segments[job.n_used].start;
  // Every chosen pair's row of b, converted, at its plan position.
  char* rows = static_cast<char*>(p.wdata);
  {
    const RowRange r = split_rows(n_valid, p.ith, p.nth);
    std::vector<float> gather;
    for (int64_t q = r.begin; q < r.end; ++q) {
      const int64_t pair = job.pair_at(q);
      convert_b_row(*p.kernels, job.vtype, job.b, job.b_slot(pair), pair / s.k, 0,
                    rows + static_cast<size_t>(q) * job.vrow, gather);
    }
  }
  p.barrier->wait();
  if (job.n_used == 0) return;

  // Items: for each chosen expert, its blocks of pairs by its blocks of rows.
  const int64_t blocks = blocks_per_batch_for(s.M, n_valid / job.n_used, job.n_used, p.nth);
  // Aligned whatever an expert's count of pairs: the same bits on any thread count (kRowAlign).
  const int64_t block_rows = std::min(kBlockRows, round_up((s.M + blocks - 1) / blocks, kRowAlign));
  const int64_t row_blocks = (s.M + block_rows - 1) / block_rows;
  int64_t items = 0;
  for (int64_t u = 0; u < job.n_used; ++u) {
    segments[u].first_item = items;
    items += row_blocks * ((job.count(u) + kBlockPairs - 1) / kBlockPairs);
  }
  segments[job.n_used].first_item = items;
  auto* block = reinterpret_cast<float*>(slot + l.plan);
  for (int64_t item = p.next_chunk->fetch_add(1); item < items; item = p.next_chunk->fetch_add(1)) {
    const Segment* seg = std::upper_bound(segments, segments + job.n_used, item,
                                          [](int64_t i, const Segment& g) { return i < g.first_item; }) -
                         1;
    const int64_t u = seg - segments;
    const int64_t local = item - seg->first_item;
    const int64_t j0 = (local / row_blocks) * kBlockPairs;
    const int64_t m0 = (local % row_blocks) * block_rows;
    const int64_t n = std::min(kBlockPairs, job.count(u) - j0);
    const int64_t q0 = seg->start + j0;
    job.multiply(seg->expert, m0, std::min(s.M, m0 + block_rows), rows + static_cast<size_t>(q0) * job.vrow, q0, n,
                 block);
  }
}

}  // namespace

size_t mul_mat_id_work_size(const Tensor& dst, int nth) {
  const Layout l = layout_of(dst);
  return add_sat(l.shared, mul_sat(l.slot, static_cast<size_t>(nth)));
}

Scratch mul_mat_id_scratch(const Tensor& dst) {
  return layout_of(dst).per_thread ? Scratch::per_thread : Scratch::shared;
}

void op_mul_mat_id(const ComputeParams& p, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Shape s = shape_of(dst);
  if (s.M == 0 || s.pairs() == 0) return;
  const Layout l = layout_of(dst);
  // A per-thread node's slot is where every per-thread node's is (op_kernels.h).
  char* slot =
      l.per_thread ? scratch_slot(p) : static_cast<char*>(p.wdata) + l.shared + l.slot * static_cast<size_t>(p.ith);
  auto* keys = reinterpret_cast<uint64_t*>(slot + l.own_b);
  auto* segments = reinterpret_cast<Segment*>(keys + s.pairs());
  const DType vtype = vec_dot_type(a.type);
  Job job{a,     *dst.src[1],           *dst.src[2], dst,      s, gemm_for(*p.kernels, a.type),
          vtype, row_bytes(vtype, s.K), keys,        segments, 0};
  zero_unchosen_rows(p, job);
  if (s.K == 0) return;
  job.n_used = make_plan(job.ids, s, keys, segments);
  if (s.decode()) {
    run_decode(p, job, l, slot);
  } else {
    run_prefill(p, job, l, slot, segments);
  }
}

}  // namespace tensorpc::cpu
