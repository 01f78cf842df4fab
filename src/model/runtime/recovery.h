// PlacementRecovery: what a Generator asks when one of its steps fails, so
// that a server lost in the middle of a generation does not end it.
//
// The generator asks lost() whether the failure lost servers of its
// placement. When it did, the generator lets go of everything it holds on
// the placement (its plans, its graph), asks replace() for a new placement
// — the same layers reloaded on the restarted server, or moved to a standby
// or to the devices left (src/api/cluster_recovery.h) — evaluates again
// every token its sequences hold, as prefill steps, to rebuild the KV cache,
// tells recovered() what that took, and runs the failed step again. The
// placement replace() returns must have the same context (n_ctx) as the one
// it replaces.
//
// When replace() fails, the generator is left with no placement: its next
// step asks replace() again before it runs (serve's next request tries
// again, say), with no servers named lost.
//
// Ownership: the generator borrows its recovery (GeneratorOptions::recovery),
// which must outlive it. The calls come from the thread stepping the
// generator.
#pragma once

#include <string>
#include <vector>

#include "model/runtime/placement.h"
#include "tensorpc/status.h"

namespace tensorpc {

class PlacementRecovery {
 public:
  virtual ~PlacementRecovery() = default;
  // The servers of the placement that `failure`, the error of a step, lost:
  // those whose session ended or that no longer answer. Empty: none was
  // lost, and the failure is the step's answer.
  virtual std::vector<std::string> lost(const Status& failure) = 0;
  // A new placement without what was lost (`lost` may be empty when a
  // replace() before failed: the servers that one named). The old placement
  // is destroyed first; nothing may use it any more. Fails, naming the
  // servers and what was tried, when nothing could take their place.
  virtual StatusOr<ModelPlacement*> replace(const std::vector<std::string>& lost, const Status& failure) = 0;
  // The new placement is ready: replace() took `place_seconds`, then
  // `tokens` were evaluated again in `replay_seconds` to rebuild the cache.
  // Or, when `failure` is not ok, evaluating them failed (and lost() is
  // asked again).
  virtual void recovered(int64_t tokens, double place_seconds, double replay_seconds, const Status& failure) = 0;
};

}  // namespace tensorpc
