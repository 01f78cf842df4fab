#include "tensorpc/graph.h"

namespace tensorpc {

Graph Graph::build(std::initializer_list<Tensor*> outputs) {
  return build(std::vector<Tensor*>(outputs));
}

Graph Graph::build(const std::vector<Tensor*>& outputs) {
  Graph g;
  for (Tensor* t : outputs) {
    if (t == nullptr) throw Error(invalid_argument("graph: an output is null"));
    t->flags |= kFlagOutput;
    g.outputs_.push_back(t);
    g.expand(t);
  }
  return g;
}

void Graph::expand(Tensor* t) { visit(t); }

// Depth-first, post-order: a tensor is appended after everything it reads.
// Iterative, so a deep graph (hundreds of layers) cannot overflow the stack.
void Graph::visit(Tensor* root) {
  struct Frame {
    Tensor* t;
    int next;  // next source to look at; kMaxSources means the view source
  };
  if (root == nullptr || visited_.count(root)) return;
  std::vector<Frame> stack{{root, 0}};
  visited_.insert(root);
  while (!stack.empty()) {
    Frame& f = stack.back();
    Tensor* child = nullptr;
    while (f.next <= kMaxSources && child == nullptr) {
      Tensor* c = f.next < kMaxSources ? f.t->src[f.next] : f.t->view_src;
      ++f.next;
      if (c != nullptr && !visited_.count(c)) child = c;
    }
    if (child != nullptr) {
      visited_.insert(child);
      stack.push_back({child, 0});
      continue;
    }
    Tensor* done = f.t;
    stack.pop_back();
    if (done->op == Op::none && done->view_src == nullptr) {
      leafs_.push_back(done);
    } else {
      nodes_.push_back(done);
    }
  }
}

}  // namespace tensorpc
