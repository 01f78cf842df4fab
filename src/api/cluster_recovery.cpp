// Recovering from a lost server (cluster_recovery.h).
#include "api/cluster_recovery.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

namespace tensorpc {
namespace {

using Clock = std::chrono::steady_clock;

// The probe of a session or of a server coming back waits at most this long
// for its answer (less when the user's timeout is shorter).
constexpr std::chrono::milliseconds kProbeTimeout{5000};
constexpr std::chrono::milliseconds kRetryEvery{100};

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace

ClusterRecovery::ClusterRecovery(PlacedModel& placed, RecoveryOptions options, RemoteOptions remote,
                                 PlacementOptions base, std::vector<double> split)
    : placed_(placed), options_(std::move(options)), remote_(std::move(remote)), base_(std::move(base)) {
  probe_ = remote_;
  if (probe_.reply_timeout.count() == 0 || probe_.reply_timeout > kProbeTimeout) probe_.reply_timeout = kProbeTimeout;
  const std::vector<Device*> devices = placed_.devices.devices();
  for (size_t i = 0; i < split.size() && i < devices.size(); ++i) split_.emplace_back(devices[i]->name(), split[i]);
  state_.standby = options_.standby;
}

void ClusterRecovery::set_health(const std::string& health, const std::string& reason) {
  std::lock_guard lock(mu_);
  state_.health = health;
  state_.reason = reason;
}

void ClusterRecovery::say(const std::string& line) {
  if (options_.on_event) options_.on_event(line);
}

RecoveryState ClusterRecovery::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

void ClusterRecovery::with_placement(const std::function<void(const ModelPlacement*)>& fn) const {
  std::shared_lock lock(placement_mu_, std::try_to_lock);
  fn(lock.owns_lock() ? placed_.placement.get() : nullptr);
}

std::vector<std::string> ClusterRecovery::lost(const Status& failure) {
  std::vector<std::string> out;
  // A lost server fails a step with an I/O or protocol error, or a handle its new process never made.
  const StatusCode c = failure.code();
  const bool may_be_a_loss = c == StatusCode::io_error || c == StatusCode::protocol_error || c == StatusCode::not_found;
  if (!options_.enabled || !may_be_a_loss || placed_.placement == nullptr) return out;
  // The servers holding part of the model: layers, or weights an override put there.
  std::vector<std::string> holding;
  const auto hold = [&](size_t device) {
    const std::string& e = placed_.devices.server_of(device);
    if (!e.empty() && std::find(holding.begin(), holding.end(), e) == holding.end()) holding.push_back(e);
  };
  for (size_t d : placed_.placement->layer_device()) hold(d);
  for (const ModelPlacement::OverrideUse& u : placed_.placement->overrides()) hold(u.device);
  for (const std::string& e : holding) {
    if (!check_session(e, probe_).ok()) out.push_back(e);
  }
  for (const std::string& e : out) say("server " + e + " lost: " + failure.to_string());
  return out;
}

bool ClusterRecovery::answers(const std::string& endpoint, double wait_s) const {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s));
  for (;;) {
    if (ping(endpoint, probe_).ok()) return true;
    if (Clock::now() + kRetryEvery > deadline) return false;
    std::this_thread::sleep_for(kRetryEvery);
  }
}

std::vector<double> ClusterRecovery::split_now() const {
  if (split_.empty()) return {};
  const std::vector<Device*> devices = placed_.devices.devices();
  double known_sum = 0;
  for (const auto& [name, ratio] : split_) known_sum += ratio;
  const double mean = known_sum / static_cast<double>(split_.size());
  std::vector<double> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (placed_.devices.helper_cpu() && i + 1 == devices.size()) {
      out.push_back(0);
      continue;
    }
    const auto it =
        std::find_if(split_.begin(), split_.end(), [&](const auto& r) { return r.first == devices[i]->name(); });
    out.push_back(it != split_.end() ? it->second : mean);  // a device new to the model: an average share
  }
  if (std::all_of(out.begin(), out.end(), [](double r) { return r == 0; })) return {};
  return out;
}

StatusOr<std::unique_ptr<ModelPlacement>> ClusterRecovery::place(std::vector<double> ratios) {
  const std::vector<Device*> devices = placed_.devices.devices();
  PlacementOptions p = base_;
  p.ratios = std::move(ratios);
  p.overrides.clear();
  for (const PlacementOverride& o : base_.overrides) {
    const bool there = std::any_of(devices.begin(), devices.end(), [&](Device* d) { return d->name() == o.device; });
    if (there) {
      p.overrides.push_back(o);
    } else {
      say("--override-tensor " + o.pattern + "=" + o.device +
          " left out: that device is gone; its weights go with their layers");
    }
  }
  return ModelPlacement::create(*placed_.model, devices, std::move(p));
}

StatusOr<ModelPlacement*> ClusterRecovery::replace(const std::vector<std::string>& lost_now, const Status& failure) {
  std::unique_lock lock(placement_mu_);
  const bool again = lost_now.empty();  // a replace() before failed: try its servers once more, without waiting
  const std::vector<std::string> lost = again ? pending_ : lost_now;
  const double wait = again ? 0 : options_.reconnect_wait_s;

  // The layers each device had, and each server, before the placement goes.
  std::map<std::string, int64_t> device_layers, server_layers;
  if (placed_.placement) {
    const std::vector<Device*>& devices = placed_.placement->devices();
    for (size_t d : placed_.placement->layer_device()) {
      ++device_layers[devices[d]->name()];
      ++server_layers[placed_.devices.server_of(d)];
    }
  }
  placed_.placement.reset();  // its buffers freed on the servers that remain

  std::vector<std::string> tried, dropped;
  std::map<std::string, std::string> took_place_of;  // a server now in the set → the lost one it stands for
  for (const std::string& e : lost) {
    const std::vector<std::string>& now = placed_.devices.endpoints();
    const bool present = std::find(now.begin(), now.end(), e) != now.end();
    set_health("recovering", "server " + e + " lost");
    if (wait > 0) say("waiting up to " + seconds_text(wait) + " for " + e + " to answer again");
    if (answers(e, wait)) {
      const Status s = present ? placed_.devices.replace_server(e, e, remote_) : placed_.devices.add_server(e, remote_);
      if (s.ok()) {
        say("server " + e + " answers again: its layers are loaded there again");
        took_place_of[e] = e;
        continue;
      }
      tried.push_back(e + " answered but " + s.message());
    } else {
      tried.push_back(e + " did not answer again within " + seconds_text(wait));
    }
    std::vector<std::string> standby;
    {
      std::lock_guard state_lock(mu_);
      standby = state_.standby;
    }
    std::string taken;
    std::vector<std::string> standby_tried;
    for (const std::string& s : standby) {
      if (!answers(s, 0)) {
        standby_tried.push_back(s + " did not answer");
        continue;
      }
      const Status st =
          present ? placed_.devices.replace_server(e, s, remote_) : placed_.devices.add_server(s, remote_);
      if (!st.ok()) {
        standby_tried.push_back(st.message());
        continue;
      }
      taken = s;
      break;
    }
    if (!standby.empty() && taken.empty()) tried.push_back("no standby server answered (" + join(standby_tried) + ")");
    if (!taken.empty()) {
      {
        std::lock_guard state_lock(mu_);
        std::erase(state_.standby, taken);
      }
      say("standby server " + taken + " takes the place of " + e);
      took_place_of[taken] = e;
      continue;
    }
    if (present) (void)placed_.devices.replace_server(e, "", remote_);  // dropping cannot fail
    dropped.push_back(e);
  }

  // Every device keeps its layers when the lost servers came back or found a
  // standby; otherwise the model is placed as a start without them would.
  std::vector<double> keep;
  if (dropped.empty() && !device_layers.empty()) {
    const std::vector<Device*> devices = placed_.devices.devices();
    std::map<std::string, int64_t> server_devices;
    for (size_t i = 0; i < devices.size(); ++i) ++server_devices[placed_.devices.server_of(i)];
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string& server = placed_.devices.server_of(i);
      const auto stands_for = took_place_of.find(server);
      if (stands_for != took_place_of.end() && stands_for->first != stands_for->second) {
        // A standby: the lost server's layers, shared evenly by its devices.
        keep.push_back(static_cast<double>(server_layers[stands_for->second]) /
                       static_cast<double>(server_devices[server]));
      } else if (auto it = device_layers.find(devices[i]->name()); it != device_layers.end()) {
        keep.push_back(static_cast<double>(it->second));
      } else {
        keep.push_back(0);
      }
    }
    if (std::all_of(keep.begin(), keep.end(), [](double r) { return r == 0; })) keep.clear();
  }
  if (!dropped.empty()) say("placing the model again without " + join(dropped));
  auto placed = keep.empty() ? place(split_now()) : place(keep);
  if (!placed.ok() && !keep.empty()) {
    say("the layers cannot stay where they were (" + placed.status().message() + "): placing them anew");
    placed = place(split_now());
  }
  if (!placed.ok()) {
    // The servers dropped are tried again by the next replace(), with those that came back.
    pending_ = lost;
    const std::string what = "server" + std::string(lost.size() > 1 ? "s " : " ") + join(lost) + " lost" +
                             (failure.ok() ? std::string() : " (" + failure.message() + ")") +
                             (tried.empty() ? std::string() : ": " + join(tried)) +
                             "; the devices left cannot take the model: " + placed.status().message();
    {
      std::lock_guard state_lock(mu_);
      ++state_.failures;
      state_.serving = false;
      state_.health = "degraded";
      state_.reason = what;
    }
    say("recovery failed: " + what);
    return unavailable(what);
  }
  placed_.placement = std::move(placed).value();
  pending_.clear();
  {
    std::lock_guard state_lock(mu_);
    state_.serving = true;
    // A dropped server that comes back later may stand by.
    for (const std::string& e : dropped) {
      if (std::find(state_.standby.begin(), state_.standby.end(), e) == state_.standby.end()) {
        state_.standby.push_back(e);
      }
    }
    state_.reason = dropped.empty() ? "server " + join(lost) + " lost: evaluating the sequences again"
                                    : "running without " + join(dropped);
  }
  say("placed again:\n" + placed_.placement->table());
  return placed_.placement.get();
}

void ClusterRecovery::recovered(int64_t tokens, double place_seconds, double replay_seconds, const Status& failure) {
  char line[200];
  std::snprintf(line, sizeof line, "recovered in %.2f s: placed again in %.2f s, %lld tokens evaluated again in %.2f s",
                place_seconds + replay_seconds, place_seconds, static_cast<long long>(tokens), replay_seconds);
  {
    std::lock_guard lock(mu_);
    state_.seconds += place_seconds + replay_seconds;
    if (failure.ok()) {
      ++state_.recoveries;
      state_.tokens_replayed += static_cast<uint64_t>(tokens);
      const bool degraded = state_.reason.rfind("running without", 0) == 0;
      state_.health = degraded ? "degraded" : "ok";
      if (!degraded) state_.reason.clear();
    }
  }
  say(failure.ok() ? std::string(line) : "evaluating the sequences again failed: " + failure.to_string());
}

}  // namespace tensorpc
