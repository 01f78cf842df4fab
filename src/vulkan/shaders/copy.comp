// Data movement with a type on each side (TYPE 0 f32, 1 f16), one invocation
// an element of the node:
//   GET_ROWS 0: cpy. Flat element k of the node (ne[0] fastest) takes flat
//     element k of src[0], whatever their shapes and strides.
//   GET_ROWS 1: get_rows. Row (j, b, c) of the node is row ids[j, b % ids.ne1,
//     c % ids.ne2] of a's matrix (b % a.ne2, c % a.ne3); an index outside a
//     gives zeros.
#version 450
#include "common.glsl"

layout(constant_id = 0) const uint SRC_TYPE = 0;
layout(constant_id = 1) const uint DST_TYPE = 0;
layout(constant_id = 2) const uint GET_ROWS = 0;
layout(local_size_x = 256) in;

layout(binding = 0) writeonly buffer D32 { float d32[]; };
layout(binding = 0) writeonly buffer D16 { float16_t d16[]; };
layout(binding = 1) readonly buffer A32 { float a32[]; };
layout(binding = 1) readonly buffer A16 { float16_t a16[]; };
layout(binding = 2) readonly buffer Ids { int ids[]; };

float load_src(uint j) { return SRC_TYPE == 1 ? float(a16[j]) : a32[j]; }

void main() {
  const uint k = flat_invocation();
  if (k >= n_elements(0)) return;
  const uvec4 i = unravel(0, k);
  float v = 0.0;
  if (GET_ROWS == 0) {
    const uvec4 s = unravel(1, k);
    v = load_src(at(1, s.x, s.y, s.z, s.w));
  } else {
    const int row = ids[at(2, i.y, i.z % args.ne[2].y, i.w % args.ne[2].z, 0)];
    if (row >= 0 && uint(row) < args.ne[1].y) v = load_src(at(1, i.x, uint(row), i.z % args.ne[1].z, i.w % args.ne[1].w));
  }
  const uint j = at(0, i.x, i.y, i.z, i.w);
  if (DST_TYPE == 1) d16[j] = float16_t(v);
  else d32[j] = v;
}
