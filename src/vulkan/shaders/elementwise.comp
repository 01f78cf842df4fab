// Element-wise ops, one per value of OP: the binary ones (b broadcast over a,
// each dim of b 1 or a's), scale, the activations, diag_mask_inf (-inf
// where i0 > n_past + i1, n_past p.x) and swiglu_clamp (alpha p.x, limit p.y,
// f32 bits). Every tensor f32.
#version 450
#include "common.glsl"

layout(constant_id = 0) const uint OP = 0;
layout(local_size_x = 256) in;

const uint ADD = 0, SUB = 1, MUL = 2, DIV = 3, SCALE = 4, SILU = 5, GELU = 6, TANH = 7, SWIGLU = 8, DIAG_MASK_INF = 9;
const uint SIGMOID = 10, SWIGLU_CLAMP = 11;

layout(binding = 0) writeonly buffer D { float d[]; };
layout(binding = 1) readonly buffer A { float a[]; };
layout(binding = 2) readonly buffer B { float b[]; };

float silu(float x) { return x / (1.0 + exp(-x)); }

// 0.5 x (1 + tanh(y)) written as x / (1 + e^-2y), as the CPU device does.
float gelu(float x) {
  const float y = 0.79788456080286535588 * x * (1.0 + 0.044715 * x * x);
  return x / (1.0 + exp(-2.0 * y));
}

// tanh: (1 - e) / (1 + e), e = e^-2|x|, and the odd series below 1/4 where
// that difference cancels; the sign is x's.
float tanh_f32(float x) {
  const float ax = abs(x);
  const float e = exp(-2.0 * ax);
  const float a2 = ax * ax;
  const float small = ax + ax * a2 * (-1.0 / 3 + a2 * (2.0 / 15 + a2 * (-17.0 / 315 + a2 * (62.0 / 2835))));
  const float t = ax < 0.25 ? small : (1.0 - e) / (1.0 + e);
  return x < 0.0 || (x == 0.0 && floatBitsToUint(x) != 0u) ? -t : t;
}

// 1 / (1 + e^-x): 0 at -inf, 1 at +inf, as the CPU device.
float sigmoid(float x) { return 1.0 / (1.0 + exp(-x)); }

// gpt-oss's clamped SwiGLU (op.h): the gate at most limit, the up within
// [-limit, limit], a NaN either way counting as limit (the CPU device's
// std::fmin and fmax; GLSL's min and clamp leave NaN undefined).
float swiglu_clamp(float x, float y) {
  const float limit = uintBitsToFloat(args.p.y);
  const float g = isnan(x) || x > limit ? limit : x;
  const float u = isnan(y) ? limit : clamp(y, -limit, limit);
  return g / (1.0 + exp(-uintBitsToFloat(args.p.x) * g)) * (u + 1.0);
}

void main() {
  const uint k = flat_invocation();
  if (k >= n_elements(0)) return;
  const uvec4 i = unravel(0, k);
  const float x = a[at(1, i.x, i.y, i.z, i.w)];
  float y = 0.0;
  if (OP <= DIV || OP == SWIGLU || OP == SWIGLU_CLAMP) {
    const uvec4 j = i % args.ne[2];
    y = b[at(2, j.x, j.y, j.z, j.w)];
  }
  float r;
  if (OP == ADD) r = x + y;
  else if (OP == SUB) r = x - y;
  else if (OP == MUL) r = x * y;
  else if (OP == DIV) r = x / y;
  else if (OP == SCALE) r = x * uintBitsToFloat(args.p.x);
  else if (OP == SILU) r = silu(x);
  else if (OP == GELU) r = gelu(x);
  else if (OP == TANH) r = tanh_f32(x);
  else if (OP == SWIGLU) r = silu(x) * y;
  else if (OP == SIGMOID) r = sigmoid(x);
  else if (OP == SWIGLU_CLAMP) r = swiglu_clamp(x, y);
  else r = i.x <= args.p.x + i.y ? x : uintBitsToFloat(0xff800000u);
  d[at(0, i.x, i.y, i.z, i.w)] = r;
}
