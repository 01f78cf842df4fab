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

// Values in a block of type.
uint block_values(uint type) { return type >= TYPE_Q2_K ? 256 : 32; }

// Byte b of the block starting at word w.
uint block_byte(uint w, uint b) { return (uint(weight_words[w + b / 2]) >> (8 * (b & 1))) & 0xffu; }

float block_half(uint w, uint b) { return unpackHalf2x16(uint(weight_words[w + b / 2])).x; }

int signed_byte(uint w, uint b) { return int(block_byte(w, b) << 24) >> 24; }

// Sub-block j's 6-bit scale (min 0) or min (min 1) of the q4_K or q5_K block at w.
uint q4_k_scale(uint w, uint j, uint min) {
  const uint s = 4;  // scales start at byte 4
  if (j < 4) return block_byte(w, s + j + 4 * min) & 63;
  if (min == 0) return (block_byte(w, s + j + 4) & 0xf) | ((block_byte(w, s + j - 4) >> 6) << 4);
  return (block_byte(w, s + j + 4) >> 4) | ((block_byte(w, s + j) >> 6) << 4);
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
    return vec2(block_half(w, 0) * float(q4_k_scale(w, sub, 0)), block_half(w, 2) * float(q4_k_scale(w, sub, 1)));
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

// Values 8 c .. 8 c + 7 of the block of type at word w: one run, whose scale
// and bias are read once.
void block_run(uint type, uint w, uint c, out float v[8]) {
  const vec2 a = block_affine(type, w, 8 * c);
  for (uint j = 0; j < 8; ++j) v[j] = a.x * block_code(type, w, 8 * c + j) - a.y;
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
