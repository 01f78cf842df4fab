// The weight types a shader reads from binding 1, and the value of one
// element of a block (the byte layouts are GGUF's, as src/core/quant.h
// describes them):
//   TYPE_F32, TYPE_F16, TYPE_BF16: plain elements.
//   32 values a block, value d q (+ m where the type has it):
//     TYPE_Q8_0: f16 d, int8 q[32].
//     TYPE_Q4_0, TYPE_Q4_1: f16 d (, f16 m), 16 bytes: value j in byte j's
//       low nibble, value j + 16 in its high one; q4_0's q is nibble - 8.
//     TYPE_Q5_0, TYPE_Q5_1: f16 d (, f16 m), 32 fifth bits (bit j of a
//       little-endian u32 for value j), nibbles as q4_0; q5_0's q is q - 16.
//     TYPE_IQ4_NL: f16 d, nibbles as q4_0, each an index into kIQ4NL.
//   256 values a block, sub-blocks with scales (value d scale q - dmin min):
//     TYPE_Q2_K, TYPE_Q3_K, TYPE_Q4_K, TYPE_Q5_K, TYPE_Q6_K, TYPE_IQ4_XS.
// A quantized tensor is read as 16-bit words (every block is a whole number of
// them): its offset and strides are in words, and its ne0 stride is a block's.
// In the order of vk_ops.cpp's kShaderTypes; the 256-value block types last.
const uint TYPE_F32 = 0, TYPE_F16 = 1, TYPE_BF16 = 2, TYPE_Q8_0 = 3, TYPE_Q4_0 = 4, TYPE_Q4_1 = 5, TYPE_Q5_0 = 6;
const uint TYPE_Q5_1 = 7, TYPE_IQ4_NL = 8, TYPE_Q2_K = 9, TYPE_Q3_K = 10, TYPE_Q4_K = 11, TYPE_Q5_K = 12;
const uint TYPE_Q6_K = 13, TYPE_IQ4_XS = 14;

const int kIQ4NL[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

layout(binding = 1) readonly buffer WeightF32 { float weight_f32[]; };
layout(binding = 1) readonly buffer WeightF16 { float16_t weight_f16[]; };
layout(binding = 1) readonly buffer WeightWords { uint16_t weight_words[]; };

layout(binding = 1) readonly buffer WeightPairs { uint weight_pairs[]; };
layout(binding = 1) readonly buffer WeightQuads { uvec4 weight_quads[]; };

// What a shader knows of where the weight's blocks start (vk_ops.cpp sets
// it from the tensor's offset and strides): ALIGN_EVEN, every block at an
// even word, so pairs are read as they are; ALIGN_16, every block at a
// multiple of 16 bytes too (q4_K, q5_K), so runs of 4 pairs from such a
// word are read as uvec4s. Otherwise a pair at an odd word is put together
// from the two u32s around it, both within the binding, whose range starts
// and ends at multiples of 4 bytes.
const uint ALIGN_ANY = 0, ALIGN_EVEN = 1, ALIGN_16 = 2;

// Words w and w + 1 as one little-endian u32 (a pair).
uint word_pair(uint w, uint align) {
  if (align >= ALIGN_EVEN) return weight_pairs[w / 2];
  return uint(weight_words[w]) | (uint(weight_words[w + 1]) << 16);
}

// Values in a block of type.
uint block_values(uint type) { return type >= TYPE_Q2_K ? 256 : 32; }

// Byte b of the block starting at word w.
uint block_byte(uint w, uint b) { return (uint(weight_words[w + b / 2]) >> (8 * (b & 1))) & 0xffu; }

float block_half(uint w, uint b) { return unpackHalf2x16(uint(weight_words[w + b / 2])).x; }

int signed_byte(uint w, uint b) { return int(block_byte(w, b) << 24) >> 24; }

// Sub-block j's 6-bit scale (.x) and min (.y) of the q4_K or q5_K block at
// word w, from its bytes 4..15 (three pairs): j < 4 in bytes 4 + j and
// 8 + j, j >= 4 in 8 + j's nibbles and the top bits of j and j + 4.
uvec2 q4_k_scale_min(uint w, uint j, uint align) {
  const uint at_byte = 8 * (j % 4);
  const uint a = word_pair(w + 2, align) >> at_byte, b = word_pair(w + 4, align) >> at_byte;
  const uint c = word_pair(w + 6, align) >> at_byte;
  if (j < 4) return uvec2(a & 63u, b & 63u);
  return uvec2((c & 0xfu) | ((a >> 6 & 3u) << 4), (c >> 4 & 0xfu) | ((b >> 6 & 3u) << 4));
}

// The nibble of value i of a 32-value block whose 16 bytes start at byte b.
uint nibble32(uint w, uint b, uint i) {
  const uint byte = block_byte(w, b + i % 16);
  return i < 16 ? byte & 0xf : byte >> 4;
}

// Bit i of the little-endian u32 at byte b.
uint bit32(uint w, uint b, uint i) { return (block_byte(w, b + i / 8) >> (i % 8)) & 1; }

// A block's value i is scale * code - bias, where code is its integer code
// and scale and bias are shared by the aligned run of 8 values holding i (a
// 32-value block's by the whole block, a 256-value block's by its sub-block
// of 16 or 32): block_affine gives (scale, bias) of value i's run,
// block_code the code.
vec2 block_affine(uint type, uint w, uint i) {
  if (type < TYPE_Q2_K) {
    const float d = block_half(w, 0);
    if (type == TYPE_Q4_1 || type == TYPE_Q5_1) return vec2(d, -block_half(w, 2));
    return vec2(d, 0.0);
  }
  const uint j = i / 16;
  if (type == TYPE_Q2_K) {
    const uint sm = block_byte(w, j);
    return vec2(block_half(w, 80) * float(sm & 0xf), block_half(w, 82) * float(sm >> 4));
  }
  if (type == TYPE_Q3_K) {
    const uint low_scale = j < 8 ? block_byte(w, 96 + j) & 0xf : block_byte(w, 96 + j - 8) >> 4;
    const uint high_scale = (block_byte(w, 96 + 8 + j % 4) >> (2 * (j / 4))) & 3;
    return vec2(block_half(w, 108) * float(int(low_scale | (high_scale << 4)) - 32), 0.0);
  }
  if (type == TYPE_Q4_K || type == TYPE_Q5_K) {
    const uint sub = i / 32;
    const vec2 sm = vec2(q4_k_scale_min(w, sub, ALIGN_ANY));
    return vec2(block_half(w, 0) * sm.x, block_half(w, 2) * sm.y);
  }
  if (type == TYPE_IQ4_XS) {
    const uint s = i / 32;
    const uint scale = ((block_byte(w, 4 + s / 2) >> (4 * (s % 2))) & 0xf) | (((uint(weight_words[w + 1]) >> (2 * s)) & 3) << 4);
    return vec2(block_half(w, 0) * float(int(scale) - 32), 0.0);
  }
  return vec2(block_half(w, 208) * float(signed_byte(w, 192 + j)), 0.0);  // TYPE_Q6_K
}

float block_code(uint type, uint w, uint i) {
  switch (type) {
    case TYPE_Q8_0: return float(signed_byte(w, 2 + i));
    case TYPE_Q4_0: return float(int(nibble32(w, 2, i)) - 8);
    case TYPE_Q4_1: return float(nibble32(w, 4, i));
    case TYPE_Q5_0: return float(int(nibble32(w, 6, i) | (bit32(w, 2, i) << 4)) - 16);
    case TYPE_Q5_1: return float(nibble32(w, 8, i) | (bit32(w, 4, i) << 4));
    case TYPE_IQ4_NL: return float(kIQ4NL[nibble32(w, 2, i)]);
    case TYPE_Q2_K:
    case TYPE_Q3_K: {
      // 2-bit planes: value 32 s + l of each half of 128 is bits 2s..2s+1 of a byte.
      const uint planes = type == TYPE_Q2_K ? 16 : 32;
      const uint low = (block_byte(w, planes + 32 * (i / 128) + i % 32) >> (2 * ((i % 128) / 32))) & 3;
      if (type == TYPE_Q2_K) return float(low);
      return float(int(low + 4 * ((block_byte(w, i % 32) >> (i / 32)) & 1)) - 4);
    }
    case TYPE_Q4_K:
    case TYPE_Q5_K: {
      const uint qs = type == TYPE_Q4_K ? 16 : 48;
      const uint byte = block_byte(w, qs + 32 * (i / 64) + i % 32);
      uint q = (i / 32) % 2 == 0 ? byte & 0xf : byte >> 4;
      if (type == TYPE_Q5_K) q |= ((block_byte(w, 16 + i % 32) >> (i / 32)) & 1) << 4;
      return float(q);
    }
    case TYPE_IQ4_XS: {
      const uint byte = block_byte(w, 8 + 16 * (i / 32) + i % 16);
      return float(kIQ4NL[i % 32 < 16 ? byte & 0xf : byte >> 4]);
    }
    default: {  // TYPE_Q6_K
      const uint half_block = i / 128, s = (i % 128) / 32, l = i % 32;
      const uint low_byte = block_byte(w, 64 * half_block + l + 32 * (s & 1));
      const uint low = s < 2 ? low_byte & 0xf : low_byte >> 4;
      const uint high = (block_byte(w, 128 + 32 * half_block + l) >> (2 * s)) & 3;
      return float(int(low | (high << 4)) - 32);
    }
  }
}

// mul_mat's reads of a block type, 32 values (a unit) at a time in decode, 8
// (a run) in the prefill tiles: the words of the codes come as u32 pairs of
// 16-bit words (word_pair), and each half of a unit (16 values) has one
// scale and bias. A 32-value block is one unit, a 256-value block eight
// (unit u its values 32 u .. 32 u + 31).

// The n pairs from word w (n <= 8; w a multiple of 8 where align is
// ALIGN_16 and n a multiple of 4).
void word_pairs(uint w, uint n, uint align, out uint x[8]) {
  if (align == ALIGN_16 && n % 4 == 0) {
    for (uint i = 0; i < n / 4; ++i) {
      const uvec4 q = weight_quads[w / 8 + i];
      x[4 * i] = q.x;
      x[4 * i + 1] = q.y;
      x[4 * i + 2] = q.z;
      x[4 * i + 3] = q.w;
    }
    return;
  }
  if (align >= ALIGN_EVEN) {
    for (uint i = 0; i < n; ++i) x[i] = weight_pairs[w / 2 + i];
    return;
  }
  // n + 1 u32s from the one holding word w, the last clamped to the one
  // holding word w + 2 n - 1; shifted down a word where w is odd.
  const uint first = w / 2, last = (w + 2 * n - 1) / 2;
  uint here = weight_pairs[first];
  for (uint i = 0; i < n; ++i) {
    const uint next = weight_pairs[min(first + i + 1, last)];
    x[i] = (w & 1) == 0 ? here : (here >> 16) | (next << 16);
    here = next;
  }
}

vec4 bytes4(uint x) { return vec4(uvec4(x, x >> 8, x >> 16, x >> 24) & 0xffu); }
vec4 signed_bytes4(uint x) { return vec4(ivec4(uvec4(x << 24, x << 16, x << 8, x)) >> 24); }
vec4 iq4_codes(uint x) {  // x: a nibble in each byte
  return vec4(kIQ4NL[x & 0xfu], kIQ4NL[(x >> 8) & 0xfu], kIQ4NL[(x >> 16) & 0xfu], kIQ4NL[(x >> 24) & 0xfu]);
}
// The fifth bits of 4 values, bits 0..3 of h, at bit 4 of each byte.
uint fifth_bits(uint h) { return ((h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21)) << 4; }

// Unit u of the block of type at word w: codes of its quads first ..
// first + count - 1 (value 4 i + j in c[i][j]; count 8, or a run's 2 with
// first even), and each half's affine: value = scale * code - bias,
// (scale, bias) of values 0..15 in .xy, of 16..31 in .zw.
vec4 unit_codes(uint type, uint w, uint u, uint first, uint count, uint align, out vec4 c[8]) {
  uint x[8], h[8];
  const uint lo4 = 0x0f0f0f0fu;
  if (type == TYPE_Q8_0) {
    word_pairs(w + 1 + 2 * first, count, align, x);
    for (uint i = 0; i < count; ++i) c[first + i] = signed_bytes4(x[i]);
    const float d = block_half(w, 0);
    return vec4(d, 0.0, d, 0.0);
  }
  if (type <= TYPE_IQ4_NL || type == TYPE_IQ4_XS) {
    // 16 bytes of nibbles: value j low in byte j, j + 16 high; quad i < 4
    // the low nibbles of pair i, i >= 4 the high ones of pair i - 4.
    const uint qs = type == TYPE_Q4_0 || type == TYPE_IQ4_NL ? 1 : type == TYPE_Q4_1 ? 2 : type == TYPE_Q5_0 ? 3
                  : type == TYPE_Q5_1 ? 4 : 4 + 8 * u;  // TYPE_IQ4_XS: sub-block u's 16 bytes
    const uint p0 = count == 8 ? 0 : first % 4, pairs = min(count, 4);
    word_pairs(w + qs + 2 * p0, pairs, align, x);
    const uint hb = type == TYPE_Q5_0 ? word_pair(w + 1, align) : type == TYPE_Q5_1 ? word_pair(w + 2, align) : 0;
    for (uint i = 0; i < pairs; ++i) {
      const uint p = p0 + i;
      uint low = x[i] & lo4, high = (x[i] >> 4) & lo4;
      vec4 c_low, c_high;
      if (type == TYPE_IQ4_NL || type == TYPE_IQ4_XS) {
        c_low = iq4_codes(low);
        c_high = iq4_codes(high);
      } else {
        c_low = bytes4(low | fifth_bits(hb >> (4 * p)));
        c_high = bytes4(high | fifth_bits(hb >> (16 + 4 * p)));
      }
      if (count == 8) {
        c[p] = c_low;
        c[p + 4] = c_high;
      } else {
        c[first + i] = first < 4 ? c_low : c_high;
      }
    }
    if (type == TYPE_IQ4_XS) {
      const vec2 a = block_affine(type, w, 32 * u);
      return vec4(a, a);
    }
    const float d = block_half(w, 0);
    const float bias = type == TYPE_Q4_0 ? 8.0 * d : type == TYPE_Q5_0 ? 16.0 * d
                     : type == TYPE_Q4_1 || type == TYPE_Q5_1 ? -block_half(w, 2) : 0.0;
    return vec4(d, bias, d, bias);
  }
  if (type == TYPE_Q4_K || type == TYPE_Q5_K) {
    const uint qs = type == TYPE_Q4_K ? 8 : 24, shift = 4 * (u % 2);
    word_pairs(w + qs + 16 * (u / 2) + 2 * first, count, align, x);
    if (type == TYPE_Q5_K) word_pairs(w + 8 + 2 * first, count, align, h);
    for (uint i = 0; i < count; ++i) {
      uint q = (x[i] >> shift) & lo4;
      if (type == TYPE_Q5_K) q |= ((h[i] >> u) & 0x01010101u) << 4;
      c[first + i] = bytes4(q);
    }
    const vec2 a = unpackHalf2x16(word_pair(w, align)) * vec2(q4_k_scale_min(w, u, align));
    return vec4(a, a);
  }
  // 16-value sub-blocks, two scales a unit.
  if (type == TYPE_Q6_K) {
    const uint half_block = u / 4, s = u % 4;
    word_pairs(w + 32 * half_block + 16 * (s & 1) + 2 * first, count, align, x);
    word_pairs(w + 64 + 16 * half_block + 2 * first, count, align, h);
    for (uint i = 0; i < count; ++i) {
      c[first + i] = bytes4(((x[i] >> (4 * (s / 2))) & lo4) | (((h[i] >> (2 * s)) & 0x03030303u) << 4));
    }
    const uint scales = uint(weight_words[w + 96 + u]);  // two signed bytes
    const float d = block_half(w, 208);
    const float d0 = d * float(int(scales << 24) >> 24), d1 = d * float(int(scales << 16) >> 24);
    return vec4(d0, 32.0 * d0, d1, 32.0 * d1);
  }
  // TYPE_Q2_K, TYPE_Q3_K: 2-bit planes, value 32 s + l of each half of 128
  // bits 2 s .. 2 s + 1 of a byte; q3_K's third bit from its high mask.
  const uint shift = 2 * (u % 4);
  word_pairs(w + (type == TYPE_Q2_K ? 8 : 16) + 16 * (u / 4) + 2 * first, count, align, x);
  if (type == TYPE_Q3_K) word_pairs(w + 2 * first, count, align, h);
  for (uint i = 0; i < count; ++i) {
    uint q = (x[i] >> shift) & 0x03030303u;
    if (type == TYPE_Q3_K) q |= ((h[i] >> u) & 0x01010101u) << 2;
    c[first + i] = bytes4(q);
  }
  const vec2 a0 = block_affine(type, w, 32 * u), a1 = block_affine(type, w, 32 * u + 16);
  if (type == TYPE_Q2_K) return vec4(a0, a1);
  return vec4(a0.x, 4.0 * a0.x, a1.x, 4.0 * a1.x);  // q3_K's code is q - 4
}

// Values 8 r .. 8 r + 7 of the block of type at word w (a run: quads 2 r
// and 2 r + 1 of its unit).
void block_run(uint type, uint w, uint r, uint align, out vec4 lo, out vec4 hi) {
  vec4 c[8];
  const uint u = r / 4, first = 2 * (r % 4);
  const vec4 a = unit_codes(type, w, u, first, 2, align, c);
  const vec2 affine = first < 4 ? a.xy : a.zw;
  lo = affine.x * c[first] - affine.y;
  hi = affine.x * c[first + 1] - affine.y;
}

// Element (i0, i1, i2, i3) of the weight (tensor t, of type).
float load_weight(uint type, uint t, uint i0, uint i1, uint i2, uint i3) {
  if (type == TYPE_F32) return weight_f32[at(t, i0, i1, i2, i3)];
  if (type == TYPE_F16) return float(weight_f16[at(t, i0, i1, i2, i3)]);
  if (type == TYPE_BF16) return uintBitsToFloat(uint(weight_words[at(t, i0, i1, i2, i3)]) << 16);
  const uint n = block_values(type);
  const uint w = at(t, i0 / n, i1, i2, i3);
  const vec2 a = block_affine(type, w, i0 % n);
  return a.x * block_code(type, w, i0 % n) - a.y;
}
