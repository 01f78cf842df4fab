// Data movement with a type on each side (quant.glsl's: the source f32, f16,
// bf16 or, for get_rows, a block type; the node f32, f16 or bf16), one
// invocation an element:
//   MODE 0: cpy. Flat element k of the node (ne[0] fastest) takes flat
//     element k of src[0], whatever their shapes and strides.
//   MODE 1: get_rows. Row (j, b, c) of the node is row ids[j, b % ids.ne1,
//     c % ids.ne2] of a's matrix (b % a.ne2, c % a.ne3); an index outside a
//     gives zeros.
//   MODE 2: set_rows. Row r of src[0] [K, n] (f32), one invocation an element
//     of it, goes to row ids[r] of the node [K, R]; an index outside [0, R)
//     writes nothing. Into q8_0 or q4_0 (DST_TYPE), one invocation a block
//     of 32 values, quantized as the CPU device does (src/core/quant.cpp).
//   MODE 3: concat (f32 or i32, copied as bits) along dim p.x: the node's
//     element takes src[0]'s where its coordinate along dim is below
//     src[0]'s size there, src[1]'s (that coordinate less it) otherwise.
#version 450
#include "common.glsl"
#include "quant.glsl"

layout(constant_id = 0) const uint SRC_TYPE = 0;
layout(constant_id = 1) const uint DST_TYPE = 0;
layout(constant_id = 2) const uint MODE = 0;
layout(local_size_x = 256) in;

const uint CPY = 0, GET_ROWS = 1, SET_ROWS = 2, CONCAT = 3;

layout(binding = 0) writeonly buffer D32 { float d32[]; };
layout(binding = 0) writeonly buffer D16 { float16_t d16[]; };
layout(binding = 0) writeonly buffer DBits { uint dbits[]; };
layout(binding = 0) writeonly buffer DWords { uint16_t dwords[]; };
layout(binding = 1) readonly buffer ABits { uint abits[]; };
layout(binding = 2) readonly buffer Ids { int ids[]; };
layout(binding = 2) readonly buffer BBits { uint bbits[]; };

float load_src(uint j) {
  if (SRC_TYPE == TYPE_BF16) return uintBitsToFloat(uint(weight_words[j]) << 16);
  return SRC_TYPE == TYPE_F16 ? float(weight_f16[j]) : weight_f32[j];
}

// v as bf16, as the CPU device rounds it: to nearest even, NaN kept a NaN.
uint bf16_bits(float v) {
  const uint bits = floatBitsToUint(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

void store_dst(uint j, float v) {
  if (DST_TYPE == TYPE_BF16) dwords[j] = uint16_t(bf16_bits(v));
  else if (DST_TYPE == TYPE_F16) d16[j] = float16_t(v);
  else d32[j] = v;
}

// int(v) for v clamped to [lo, hi], nan_value for NaN.
int clamped_int(float v, float lo, float hi, int nan_value) { return isnan(v) ? nan_value : int(clamp(v, lo, hi)); }

// std::round: halves away from zero.
float round_away(float v) { return sign(v) * floor(abs(v) + 0.5); }

// Block b of src[0]'s row r into the q8_0 or q4_0 block at word w of the node.
void quantize_block(uint b, uint r, uint w) {
  float x[32];
  float amax = 0.0, signed_max = 0.0;
  for (uint i = 0; i < 32; ++i) {
    x[i] = load_src(at(1, 32 * b + i, r, 0, 0));
    if (abs(x[i]) > amax) {
      amax = abs(x[i]);
      signed_max = x[i];
    }
  }
  const float d = DST_TYPE == TYPE_Q8_0 ? amax / 127.0 : signed_max / -8.0;
  const float id = d != 0.0 ? 1.0 / d : 0.0;
  dwords[w] = uint16_t(packHalf2x16(vec2(d, 0.0)) & 0xffffu);
  if (DST_TYPE == TYPE_Q8_0) {
    for (uint i = 0; i < 16; ++i) {
      const int q0 = clamped_int(round_away(x[2 * i] * id), -127, 127, 0);
      const int q1 = clamped_int(round_away(x[2 * i + 1] * id), -127, 127, 0);
      dwords[w + 1 + i] = uint16_t((uint(q0) & 0xffu) | ((uint(q1) & 0xffu) << 8));
    }
  } else {
    for (uint i = 0; i < 8; ++i) {
      uint word = 0;
      for (uint h = 0; h < 2; ++h) {
        const uint j = 2 * i + h;
        const int lo = clamped_int(x[j] * id + 8.5, 0, 15, 8), hi = clamped_int(x[j + 16] * id + 8.5, 0, 15, 8);
        word |= uint(lo | (hi << 4)) << (8 * h);
      }
      dwords[w + 1 + i] = uint16_t(word);
    }
  }
}

void main() {
  const uint k = flat_invocation();
  if (MODE == SET_ROWS && (DST_TYPE == TYPE_Q8_0 || DST_TYPE == TYPE_Q4_0)) {
    const uint blocks = args.ne[1].x / 32;
    if (k >= blocks * args.ne[1].y) return;
    const uint b = k % blocks, r = k / blocks;
    const int row = ids[at(2, r, 0, 0, 0)];
    if (row >= 0 && uint(row) < args.ne[0].y) quantize_block(b, r, at(0, b, uint(row), 0, 0));
    return;
  }
  if (MODE == SET_ROWS) {
    if (k >= n_elements(1)) return;
    const uvec4 s = unravel(1, k);
    const int row = ids[at(2, s.y, 0, 0, 0)];
    if (row >= 0 && uint(row) < args.ne[0].y) store_dst(at(0, s.x, uint(row), 0, 0), load_src(at(1, s.x, s.y, 0, 0)));
    return;
  }
  if (k >= n_elements(0)) return;
  const uvec4 i = unravel(0, k);
  const uint j = at(0, i.x, i.y, i.z, i.w);
  if (MODE == CONCAT) {
    const uint dim = args.p.x;
    uvec4 s = i;
    if (s[dim] < args.ne[1][dim]) {
      dbits[j] = abits[at(1, s.x, s.y, s.z, s.w)];
    } else {
      s[dim] -= args.ne[1][dim];
      dbits[j] = bbits[at(2, s.x, s.y, s.z, s.w)];
    }
    return;
  }
  float v = 0.0;
  if (MODE == CPY) {
    const uvec4 s = unravel(1, k);
    v = load_src(at(1, s.x, s.y, s.z, s.w));
  } else {
    const int row = ids[at(2, i.y, i.z % args.ne[2].y, i.w % args.ne[2].z, 0)];
    if (row >= 0 && uint(row) < args.ne[1].y) v = load_weight(SRC_TYPE, 1, i.x, uint(row), i.z % args.ne[1].z, i.w % args.ne[1].w);
  }
  store_dst(j, v);
}
