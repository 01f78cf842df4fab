// The first error among a stream's async calls, kept until synchronize()
// takes it: the Stream contract says an async error also surfaces there.
#pragma once

#include <utility>

#include "tensorpc/status.h"

namespace tensorpc {

class FirstError {
 public:
  // Keeps s when it is the first error; returns it either way.
  Status remember(Status s) {
    if (!s.ok() && first_.ok()) first_ = s;
    return s;
  }
  // The first error since the last take (ok if none), forgotten.
  Status take() { return std::exchange(first_, Status()); }

 private:
  Status first_;
};

}  // namespace tensorpc
