// top_k: the k largest values of each row of f32 a [n, ne1, ne2, ne3] and
// their indices, one workgroup a row, k = p.x <= 1024. IDS 0 (top_k, ne3 1):
// into f32 [k, 2, ne1, ne2] (row 0 the values, largest first, row 1 the
// indices as floats); IDS 1 (top_k_ids): the indices alone into i32
// [k, ne1, ne2, ne3]. The order is the CPU device's
// (src/cpu/ops_top_k.cpp): larger values first, NaN below -inf, equal values
// (-0 and +0 among them) by the lower index.
//
// A radix select over the values' 32-bit order keys finds the key of the
// k-th, threshold: every element above it is taken, and of those equal to it
// the ones of lowest index, in index order. The k candidates are then sorted
// in shared memory (bitonic, padded to 1024 with entries that rank last).
#version 450
#include "common.glsl"

layout(constant_id = 0) const uint IDS = 0;
layout(local_size_x = 256) in;

layout(binding = 0) writeonly buffer D { float d[]; };
// The same binding as i32: an index written as float bits would be a
// denormal, which a device may flush to zero.
layout(binding = 0) writeonly buffer DI { int d_ids[]; };
layout(binding = 1) readonly buffer A { float a[]; };

const uint kMaxK = 1024;
shared uint hist[256];
shared uint scan[256];
shared uint cand_key[kMaxK];
shared uint cand_index[kMaxK];
shared uint threshold, wanted_equal, taken_above, taken_equal;

// The value's rank as an unsigned integer, larger ranking higher: 0 for NaN,
// otherwise its bits made monotonic (-0 as +0), never 0.
uint order_key(float v) {
  uint bits = floatBitsToUint(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0;
  if (bits == 0x80000000u) bits = 0;
  return (bits >> 31) != 0 ? ~bits : bits | 0x80000000u;
}

// Whether candidate i ranks above candidate j.
bool ranks_above(uint i, uint j) {
  return cand_key[i] > cand_key[j] || (cand_key[i] == cand_key[j] && cand_index[i] < cand_index[j]);
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  const uint ne1 = args.ne[1].y, ne2 = args.ne[1].z, n = args.ne[1].x, k = args.p.x;
  if (row >= ne1 * ne2 * args.ne[1].w) return;
  const uint r1 = row % ne1, r2 = (row / ne1) % ne2, r3 = row / (ne1 * ne2), t = gl_LocalInvocationID.x;

  // The threshold key, 8 bits a pass from the top: wanted_equal counts how
  // many of the elements whose key begins with the digits found so far are
  // still to be taken.
  if (t == 0) {
    threshold = 0;
    wanted_equal = k;
  }
  uint mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[t] = 0;
    barrier();
    for (uint i = t; i < n; i += 256) {
      const uint key = order_key(a[at(1, i, r1, r2, r3)]);
      if ((key & mask) == threshold) atomicAdd(hist[(key >> shift) & 255], 1);
    }
    barrier();
    if (t == 0) {
      uint above = 0;
      for (int digit = 255; digit >= 0; --digit) {
        if (above + hist[digit] >= wanted_equal) {
          threshold |= uint(digit) << shift;
          wanted_equal -= above;
          break;
        }
        above += hist[digit];
      }
    }
    mask |= 255u << shift;
    barrier();
  }

  // The candidates: keys above the threshold anywhere in [0, k - wanted_equal),
  // keys equal to it after them, the first wanted_equal in index order.
  if (t == 0) taken_above = taken_equal = 0;
  barrier();
  const uint first_equal = k - wanted_equal;
  for (uint base = 0; base < n; base += 256) {
    const uint i = base + t;
    const uint key = i < n ? order_key(a[at(1, i, r1, r2, r3)]) : 0;
    const bool above = i < n && key > threshold, equal = i < n && key == threshold;
    if (above) {
      const uint slot = atomicAdd(taken_above, 1);
      cand_key[slot] = key;
      cand_index[slot] = i;
    }
    scan[t] = equal ? 1 : 0;
    barrier();
    for (uint step = 1; step < 256; step <<= 1) {
      const uint v = t >= step ? scan[t - step] : 0;
      barrier();
      scan[t] += v;
      barrier();
    }
    const uint slot = taken_equal + scan[t] - 1;
    if (equal && slot < wanted_equal) {
      cand_key[first_equal + slot] = key;
      cand_index[first_equal + slot] = i;
    }
    barrier();
    if (t == 0) taken_equal += scan[255];
    barrier();
  }
  for (uint j = k + t; j < kMaxK; j += 256) {
    cand_key[j] = 0;
    cand_index[j] = 0xffffffffu;
  }
  barrier();

  // Bitonic sort, best first.
  for (uint size = 2; size <= kMaxK; size <<= 1) {
    for (uint stride = size / 2; stride > 0; stride >>= 1) {
      for (uint j = t; j < kMaxK; j += 256) {
        const uint partner = j ^ stride;
        if (partner > j && (((j & size) == 0) != ranks_above(j, partner))) {
          const uint key = cand_key[j], index = cand_index[j];
          cand_key[j] = cand_key[partner];
          cand_index[j] = cand_index[partner];
          cand_key[partner] = key;
          cand_index[partner] = index;
        }
      }
      barrier();
    }
  }

  for (uint j = t; j < k; j += 256) {
    const uint i = cand_index[j];
    if (IDS != 0) {
      d_ids[at(0, j, r1, r2, r3)] = int(i);
    } else {
      d[at(0, j, 0, r1, r2)] = a[at(1, i, r1, r2, r3)];
      d[at(0, j, 1, r1, r2)] = float(i);
    }
  }
}
