// Graph: the nodes needed to compute some output tensors, in an order where
// every node comes after its sources.
//
// Built from outputs by a depth-first walk over sources and view sources;
// each tensor appears once. `leafs` are the tensors with op none that the
// nodes read (weights and inputs); `nodes` are everything else, views
// included (they compute nothing, but carry placement).
#pragma once

#include <unordered_set>
#include <vector>

#include "tensorpc/status.h"
#include "tensorpc/tensor.h"

namespace tensorpc {

class Graph {
 public:
  Graph() = default;
  // The graph computing `outputs`; marks them kFlagOutput.
  static Graph build(std::initializer_list<Tensor*> outputs);
  static Graph build(const std::vector<Tensor*>& outputs);

  // Adds `t` and whatever it needs, if not already present.
  void expand(Tensor* t);

  const std::vector<Tensor*>& nodes() const { return nodes_; }
  const std::vector<Tensor*>& leafs() const { return leafs_; }
  const std::vector<Tensor*>& outputs() const { return outputs_; }
  size_t n_nodes() const { return nodes_.size(); }

 private:
  void visit(Tensor* t);

  std::vector<Tensor*> nodes_;
  std::vector<Tensor*> leafs_;
  std::vector<Tensor*> outputs_;
  std::unordered_set<const Tensor*> visited_;
};

}  // namespace tensorpc
