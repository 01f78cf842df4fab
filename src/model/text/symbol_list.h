// The doubly linked list of symbols that the BPE encoders merge in: symbols live in a vector and
// link by index (prev/next, -1 at either end); a symbol joined into its left neighbour keeps len 0
// so that queued candidates naming it can be recognised as stale.
#pragma once

#include <vector>

namespace tensorpc {

// Grows syms[left] by its next symbol and unlinks that symbol. Symbol needs integer members
// prev, next and len; the caller has checked that syms[left].next exists.
template <typename Symbol, typename Index>
void join_with_next(std::vector<Symbol>& syms, Index left) {
  Symbol& l = syms[left];
  Symbol& r = syms[l.next];
  l.len += r.len;
  r.len = 0;
  l.next = r.next;
  if (r.next >= 0) syms[r.next].prev = left;
}

}  // namespace tensorpc
