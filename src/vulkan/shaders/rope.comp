// rope: rotary position embedding of x [D, H, T, 1] (f32, any strides) at
// positions i32 [T], as the CPU device computes it (src/cpu/ops_rope.cpp):
// pair i of the first n_dims dims of a head turns by
//   theta = pos * freq_base^(-2i/n_dims) / factor_i * (freq_scale (1 - mix_i) + mix_i),
// mix_i YaRN's ramp (0 without it), and cos/sin are scaled by magnitude; the
// dims from n_dims on pass through. One invocation an element of the node.
//   NEOX 0: pair (2i, 2i+1); NEOX 1: pair (i, i + n_dims/2).
//   FACTORS 1: src[2] holds f32 frequency factors (contiguous, off[3]).
// The angle is a float, where the CPU device computes it in double, and is
// brought into [-pi, pi] before cos and sin (Vulkan bounds their error only
// there): at positions up to 32k the results differ from the CPU's by 1e-4.
//
// Tensor 2 is the positions; the slots of its descriptor that a 1-D tensor
// does not use carry the rest of the params (vk_ops.cpp, rope_args):
//   ne[2].y n_dims, ne[2].z the number of factors, nb[2].y corr_low,
//   nb[2].z corr_high; p: freq_base, freq_scale, ext_factor, magnitude.
#version 450
#include "common.glsl"

layout(constant_id = 0) const uint NEOX = 0;
layout(constant_id = 1) const uint FACTORS = 0;
layout(local_size_x = 256) in;

layout(binding = 0) writeonly buffer D { float d[]; };
layout(binding = 1) readonly buffer X { float x[]; };
layout(binding = 2) readonly buffer Pos { int pos[]; };
layout(binding = 3) readonly buffer Factors { float factors[]; };

// theta / pos for pair i.
float rate(uint i, uint n_dims) {
  const float freq_base = uintBitsToFloat(args.p.x), freq_scale = uintBitsToFloat(args.p.y);
  const float ext_factor = uintBitsToFloat(args.p.z);
  float extrap = pow(freq_base, -2.0 * float(i) / float(n_dims));
  if (FACTORS != 0 && i < args.ne[2].z) extrap /= factors[args.off.w + i];
  float mix = 0.0;
  if (ext_factor != 0.0) {
    const float corr_low = uintBitsToFloat(args.nb[2].y), corr_high = uintBitsToFloat(args.nb[2].z);
    const float y = (float(i) - corr_low) / max(0.001, corr_high - corr_low);
    mix = ext_factor * (1.0 - clamp(y, 0.0, 1.0));
  }
  return extrap * (freq_scale * (1.0 - mix) + mix);
}

// theta less the multiple of 2 pi nearest it. 2 pi is split Cody-Waite
// style into 6.28125 (8 bits: k times it is exact) and the rest.
float reduced_angle(float theta) {
  precise const float k = round(theta * 0.15915494309189535);
  precise const float r = (theta - k * 6.28125) - k * 0.0019353071795862326;
  return r;
}

void main() {
  const uint k = flat_invocation();
  if (k >= n_elements(0)) return;
  const uvec4 i = unravel(0, k);
  const uint n_dims = args.ne[2].y, half_dims = n_dims / 2;
  const uint j = at(0, i.x, i.y, i.z, i.w);
  if (i.x >= n_dims) {
    d[j] = x[at(1, i.x, i.y, i.z, i.w)];
    return;
  }
  const uint pair = NEOX != 0 ? i.x % half_dims : i.x / 2;
  const bool second = NEOX != 0 ? i.x >= half_dims : (i.x & 1u) != 0;
  const uint i0 = NEOX != 0 ? pair : 2 * pair, i1 = NEOX != 0 ? pair + half_dims : 2 * pair + 1;
  const int p = i.z < args.ne[2].x ? pos[args.off.z + i.z * args.nb[2].x] : 0;
  const float theta = reduced_angle(float(p) * rate(pair, n_dims));
  const float magnitude = uintBitsToFloat(args.p.w);
  const float c = cos(theta) * magnitude, s = sin(theta) * magnitude;
  const float x0 = x[at(1, i0, i.y, i.z, i.w)], x1 = x[at(1, i1, i.y, i.z, i.w)];
  d[j] = second ? x0 * s + x1 * c : x0 * c - x1 * s;
}
