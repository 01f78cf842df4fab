// The weight types a shader reads from binding 1, and the value of one
// element of a block (the byte layouts are GGUF's, include/tensorpc/dtype.h
// and src/core/quant.h):
//   TYPE_F32, TYPE_F16: plain elements.
//   TYPE_Q8_0: 32 values: f16 d, int8 q[32]; value d q.
//   TYPE_Q4_0: 32 values: f16 d, 16 bytes, value j in byte j's low nibble and
//     value j + 16 in its high one; value d (nibble - 8).
//   TYPE_Q4_K: 256 values: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins
//     for 8 sub-blocks of 32, 128 bytes of nibbles; value d scale q - dmin min.
//   TYPE_Q6_K: 256 values: 128 bytes of low nibbles, 64 of high bit pairs,
//     int8 scales for 16 sub-blocks of 16, f16 d; value d scale (q - 32).
// A quantized tensor is read as 16-bit words (every block is a whole number of
// them): its offset and strides are in words, and its ne0 stride is a block's.
const uint TYPE_F32 = 0, TYPE_F16 = 1, TYPE_Q8_0 = 2, TYPE_Q4_0 = 3, TYPE_Q4_K = 4, TYPE_Q6_K = 5;

layout(binding = 1) readonly buffer WeightF32 { float weight_f32[]; };
layout(binding = 1) readonly buffer WeightF16 { float16_t weight_f16[]; };
layout(binding = 1) readonly buffer WeightWords { uint16_t weight_words[]; };

// Values in a block of type.
uint block_values(uint type) { return type == TYPE_Q4_K || type == TYPE_Q6_K ? 256 : 32; }

// Byte b of the block starting at word w.
uint block_byte(uint w, uint b) { return (uint(weight_words[w + b / 2]) >> (8 * (b & 1))) & 0xffu; }

float block_half(uint w, uint b) { return unpackHalf2x16(uint(weight_words[w + b / 2])).x; }

// Sub-block j's 6-bit scale (min 0) or min (min 1) of the q4_K block at w.
uint q4_k_scale(uint w, uint j, uint min) {
  const uint s = 4;  // scales start at byte 4
  if (j < 4) return block_byte(w, s + j + 4 * min) & 63;
  if (min == 0) return (block_byte(w, s + j + 4) & 0xf) | ((block_byte(w, s + j - 4) >> 6) << 4);
  return (block_byte(w, s + j + 4) >> 4) | ((block_byte(w, s + j) >> 6) << 4);
}

// Value i of the block of type starting at word w.
float block_value(uint type, uint w, uint i) {
  if (type == TYPE_Q8_0) return block_half(w, 0) * float(int(block_byte(w, 2 + i) << 24) >> 24);
  if (type == TYPE_Q4_0) {
    const uint byte = block_byte(w, 2 + i % 16);
    return block_half(w, 0) * (float(i < 16 ? byte & 0xf : byte >> 4) - 8.0);
  }
  if (type == TYPE_Q4_K) {
    const uint byte = block_byte(w, 16 + 32 * (i / 64) + i % 32);
    const uint q = (i / 32) % 2 == 0 ? byte & 0xf : byte >> 4;
    const uint sub = i / 32;
    return block_half(w, 0) * float(q4_k_scale(w, sub, 0) * q) - block_half(w, 2) * float(q4_k_scale(w, sub, 1));
  }
  // TYPE_Q6_K
  const uint half_block = i / 128, s = (i % 128) / 32, l = i % 32;
  const uint low_byte = block_byte(w, 64 * half_block + l + 32 * (s & 1));
  const uint low = s < 2 ? low_byte & 0xf : low_byte >> 4;
  const uint high = (block_byte(w, 128 + 32 * half_block + l) >> (2 * s)) & 3;
  const int scale = int(block_byte(w, 192 + i / 16) << 24) >> 24;
  return block_half(w, 208) * float(scale) * float(int(low | (high << 4)) - 32);
}

// Element (i0, i1, i2, i3) of the weight (tensor t, of type).
float load_weight(uint type, uint t, uint i0, uint i1, uint i2, uint i3) {
  if (type == TYPE_F32) return weight_f32[at(t, i0, i1, i2, i3)];
  if (type == TYPE_F16) return float(weight_f16[at(t, i0, i1, i2, i3)]);
  const uint n = block_values(type);
  return block_value(type, at(t, i0 / n, i1, i2, i3), i0 % n);
}
