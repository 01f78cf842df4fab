// Where the threads of one graph run must meet.
//
// A barrier after every node is the simple rule, and at decode it is a real
// part of a step: a small model's layer has some twenty nodes, and at every
// barrier the faster thread waits for the slower. But consecutive nodes that
// do not touch each other's bytes — the q, k and v projections of one input,
// rope of q and of k, the gate and up projections — can run with no barrier
// between them: a thread done with its share of one starts on the next.
//
// A node waits for the nodes since the last barrier when it reads bytes one
// of them writes, writes bytes one of them reads or writes, or both use the
// shared scratch memory (see Scratch in op_kernels.h). Bytes are compared as
// address ranges, so views and tensors placed in reused memory are covered.
#pragma once

#include <cstdint>
#include <vector>

#include "tensorpc/graph.h"

namespace tensorpc::cpu {

// One flag per node of g: 1 when every thread must finish the nodes before it
// before any starts on it. Nodes with no kernel, or no elements, get 0 and
// are skipped by the run. No flag is needed after the last node: the run
// itself ends when every thread has.
std::vector<uint8_t> plan_barriers(const Graph& g);

}  // namespace tensorpc::cpu
