// ClusterRecovery: the PlacementRecovery (model/runtime/recovery.h) of a
// model placed over servers — what tensorpc::Model, and every command that
// opens a model through it, recovers from a lost server with.
//
// lost() asks each server holding part of the placement, on the connection
// its buffers live on, whether the session is still there (check_session: a
// killed or restarted server has none, a frozen one does not answer within
// the probe's few seconds) — for failures a lost server gives (I/O and
// protocol errors, a handle not found); others are the step's own. replace() then, for each lost server in turn: waits
// up to RecoveryOptions::reconnect_wait_s for it to answer again and takes its devices anew; else puts the first
// standby server that answers in its place; else drops it. The model is placed again: every device keeping the layers
// it had (a standby sharing the lost server's) when every lost server came back or found a standby — so the weights
// caches hold everything and only hashes cross the network — else as a start without the lost servers would place it
// (the split less their devices, or free memory). Tensor overrides naming a device that is gone are left out, and said
// so.
//
// Every step is said once through RecoveryOptions::on_event, and state()
// tells /health and /metrics what is happening: "recovering" during a
// replace(), "degraded" after servers were dropped or a recovery failed.
//
// Ownership: the recovery borrows the placed model, which must outlive it,
// and replaces its placement (and devices) in place. Its generator calls it
// from one thread; state() and with_placement() may be called from any.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "api/placed_model.h"
#include "model/runtime/recovery.h"
#include "tensorpc/model.h"

namespace tensorpc {

// What a recovery is doing and has done.
struct RecoveryState {
  std::string health = "ok";  // "ok", "recovering", or "degraded" (servers dropped, or a recovery failed)
  std::string reason;         // what "recovering" or "degraded" is about, naming the server
  // False from a replace() that found nothing to take a lost server's place to the next that did.
  bool serving = true;
  uint64_t recoveries = 0;  // recoveries that ended with the generation going on
  uint64_t failures = 0;    // replace() calls that found nothing to take a lost server's place
  double seconds = 0;       // spent in recoveries, in all (the replays included)
  uint64_t tokens_replayed = 0;
  std::vector<std::string> standby;  // standby servers not used yet
};

class ClusterRecovery : public PlacementRecovery {
 public:
  // `base`: the placement options the model was first placed with (context,
  // overrides, a helper CPU taking no layers); `split`: the ratios it was
  // given, one per device of placed.devices (without the helper), or empty.
  ClusterRecovery(PlacedModel& placed, RecoveryOptions options, RemoteOptions remote, PlacementOptions base,
                  std::vector<double> split);

  std::vector<std::string> lost(const Status& failure) override;
  StatusOr<ModelPlacement*> replace(const std::vector<std::string>& lost, const Status& failure) override;
  void recovered(int64_t tokens, double place_seconds, double replay_seconds, const Status& failure) override;

  RecoveryState state() const;
  // Calls `fn` with the current placement, which no replace() changes while
  // `fn` runs; with null while a replace() is under way or has failed.
  void with_placement(const std::function<void(const ModelPlacement*)>& fn) const;

 private:
  // Says `line` through on_event, and sets the health and reason.
  void say(const std::string& line);
  void set_health(const std::string& health, const std::string& reason);
  // Whether `endpoint` answers a PING within the probe's time, on a fresh
  // connection if need be, within `wait_s` seconds (tried every tenth of a second).
  bool answers(const std::string& endpoint, double wait_s) const;
  // The placement with per-device `ratios` (empty: by free memory), the
  // overrides whose device is still there.
  StatusOr<std::unique_ptr<ModelPlacement>> place(std::vector<double> ratios);
  // The split the user gave, for the devices there are now (by name); empty
  // when none was given.
  std::vector<double> split_now() const;

  PlacedModel& placed_;
  RecoveryOptions options_;
  RemoteOptions remote_;  // reply_timeout as the user gave it
  RemoteOptions probe_;   // the same, with the probe's shorter timeout
  PlacementOptions base_;
  std::vector<std::pair<std::string, double>> split_;  // the user's ratio of each device, by name
  std::vector<std::string> pending_;                   // servers lost whose place a failed replace() did not fill

  // Held exclusively by replace() while it changes the placement; shared by with_placement().
  mutable std::shared_mutex placement_mu_;
  mutable std::mutex mu_;
  RecoveryState state_;  // guarded by mu_
};

}  // namespace tensorpc
