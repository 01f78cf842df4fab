// What every shader of the Vulkan device shares: the push constants that
// describe its tensors, and the element index of a position in one of them.
//
// Tensor 0 is the node, 1 its src[0], 2 its src[1] (bindings 0..2; binding 3
// is src[2], whose offset alone is off.w). Offsets and strides are in
// elements of the tensor's own type, counted from the start of the range its
// binding covers (vk_ops.cpp fills them in).
#extension GL_EXT_shader_16bit_storage : require

layout(push_constant) uniform Args {
  uvec4 ne[3];
  uvec4 nb[3];
  uvec4 off;
  uvec4 p;  // the op's own parameters
} args;

// Element index of position (i0, i1, i2, i3) of tensor t.
uint at(uint t, uint i0, uint i1, uint i2, uint i3) {
  return args.off[t] + i0 * args.nb[t].x + i1 * args.nb[t].y + i2 * args.nb[t].z + i3 * args.nb[t].w;
}

// Position of flat element k of tensor t (ne[0] fastest).
uvec4 unravel(uint t, uint k) {
  const uvec4 n = args.ne[t];
  return uvec4(k % n.x, (k / n.x) % n.y, (k / (n.x * n.y)) % n.z, k / (n.x * n.y * n.z));
}

uint n_elements(uint t) { return args.ne[t].x * args.ne[t].y * args.ne[t].z * args.ne[t].w; }

// The flat invocation index of a 1-D job dispatched as rows of groups
// (a dispatch has at most 65535 groups along x).
uint flat_invocation() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}
