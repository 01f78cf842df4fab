// Scheduler::run: each split's boundary copies, then its graph on its
// device's stream, and the counters of the run. A server run (consecutive
// splits on one server, SchedulePlanInfo::server_runs) whose devices run
// execution plans is instead handed over whole: its splits' graphs, the
// copies between its devices, and the hand-overs to later server runs on
// other servers (a send there, a wait on the receiver) become one plan, so
// each server costs one request per run plus one synchronize at the end.
// Owned by the backend layer.
#include <algorithm>
#include <map>
#include <vector>

#include "backend/scheduler_plan.h"

namespace tensorpc {
namespace sched {

namespace {

// Traffic per channel, each channel once.
std::map<std::string, DeviceTraffic> traffic_of(const std::vector<Device*>& devices,
                                                const std::vector<std::string>& channels) {
  std::map<std::string, DeviceTraffic> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!channels[i].empty() && !out.count(channels[i])) out.emplace(channels[i], devices[i]->traffic());
  }
  return out;
}

// after - before, where a counter that went down (a new connection) counts from zero.
uint64_t delta(uint64_t after, uint64_t before) { return after >= before ? after - before : after; }

// The copy through this process, for pairs of buffers that cannot copy directly.
Status copy_through_host(const BoundaryCopy& c) {
  std::vector<char> bytes(c.src->nbytes());
  TENSORPC_RETURN_IF_ERROR(c.src->buffer->get(*c.src, bytes.data(), 0, bytes.size()));
  return c.dst->buffer->set(*c.dst, bytes.data(), 0, bytes.size());
}

}  // namespace
}  // namespace sched

StatusOr<Stream*> Scheduler::stream(size_t device) {
  sched::DeviceSlot& slot = *slots_[device];
  if (!slot.stream) {
    auto s = devices_[device]->create_stream();
    if (!s.ok()) return s.status().with_context("scheduler: stream on " + devices_[device]->name());
    slot.stream = std::move(s).value();
  }
  return slot.stream.get();
}

PlanRunner* Scheduler::runner(const std::string& channel, size_t device) {
  auto it = runners_.find(channel);
  if (it == runners_.end()) {
    auto made = devices_[device]->create_plan_runner();
    it = runners_.emplace(channel, made.ok() ? std::move(made).value() : nullptr).first;
  }
  return it->second.get();
}

Status Scheduler::run(sched::Plan& plan, const Tensor* read, void* read_dst) {
  SchedulerCounters c;
  c.runs = 1;
  const auto before = sched::traffic_of(devices_, channels_);
  const auto& runs = plan.info.server_runs;

  // Which server run each split is carried out by (-1: split by split), and
  // the plans: built from the splits in order, so a run's sends come after
  // the computes of its splits that produce them.
  std::vector<int> run_of(plan.splits.size(), -1);
  std::vector<PlanRunner*> runners(runs.size(), nullptr);
  for (size_t r = 0; r < runs.size() && options_.execution_plans; ++r) {
    runners[r] = runner(runs[r].channel, plan.splits[runs[r].first_split].device);
    if (runners[r] == nullptr) continue;
    for (size_t i = 0; i < runs[r].n_splits; ++i) run_of[runs[r].first_split + i] = static_cast<int>(r);
  }
  std::vector<ExecutionPlanSpec> specs(runs.size());
  std::vector<size_t> early(runs.size(), 0);             // per run: the sends its spec makes first thing
  std::vector<uint64_t> weights_read(runs.size(), 0);    // per run: by its computations
  std::vector<std::vector<size_t>> direct(runs.size());  // copies this process makes before run r starts
  for (size_t r = 0; r < specs.size(); ++r) {
    specs[r].wait_timeout_ms = options_.plan_wait_timeout_ms;
    // The same plan in the same placement makes the same specs: their
    // runners need not encode them again. Keys of up to 2^20 runs per plan.
    if (r < (size_t{1} << 20)) specs[r].key = (plan.placement << 20) | (r + 1);
  }
  for (size_t i = 0; i < plan.splits.size(); ++i) {
    if (run_of[i] < 0) continue;
    const size_t r = static_cast<size_t>(run_of[i]);
    sched::Split& split = plan.splits[i];
    for (size_t ci : split.copies) {
      const sched::BoundaryCopy& copy = plan.copies[ci];
      const std::string& from = channels_[copy.from];
      if (from == runs[r].channel) {
        specs[r].copy(*copy.src, *copy.dst);
        continue;
      }
      // From another server: sent by that server's latest plan before this
      // one (which ran after the source's bytes were made), else by a copy
      // through the servers before this plan starts.
      int sender = -1;
      for (int q = static_cast<int>(r) - 1; q >= 0 && !from.empty(); --q) {
        if (runs[static_cast<size_t>(q)].channel == from && runners[static_cast<size_t>(q)] != nullptr) {
          sender = q;
          break;
        }
      }
      if (sender < 0) {
        direct[r].push_back(ci);
        continue;
      }
      // Bytes in place before the run (inputs) of a sender that computes
      // little are sent before its computations
      // (SchedulerOptions::early_inputs_below_bytes).
      ExecutionPlanSpec& by = specs[static_cast<size_t>(sender)];
      by.send(*copy.src, *copy.dst);
      if (copy.before_run && weights_read[static_cast<size_t>(sender)] < options_.early_inputs_below_bytes) {
        size_t& first = early[static_cast<size_t>(sender)];
        std::rotate(by.steps.begin() + static_cast<std::ptrdiff_t>(first), by.steps.end() - 1, by.steps.end());
        ++first;
      }
      specs[r].wait(*copy.src, *copy.dst);
    }
    specs[r].compute(*devices_[split.device], split.graph);
    weights_read[r] += split.weight_bytes;
  }

  std::vector<bool> pending(devices_.size(), false);  // stream computes issued and not yet waited for
  std::map<std::string, bool> plan_pending;           // per channel: plans started, not yet waited for
  const auto wait = [&](size_t d) -> Status {
    if (auto it = plan_pending.find(channels_[d]); it != plan_pending.end() && it->second) {
      it->second = false;
      Status s = runners_[channels_[d]]->synchronize();
      if (!s.ok()) return s.with_context("scheduler: execution plan on " + channels_[d]);
    }
    if (!pending[d]) return Status();
    pending[d] = false;
    Status s = slots_[d]->stream->synchronize();
    return s.ok() ? s : s.with_context("scheduler: on " + devices_[d]->name());
  };
  const auto make_copy = [&](size_t ci) -> Status {
    const sched::BoundaryCopy& copy = plan.copies[ci];
    // A device reached through the same connection as the destination runs
    // every command in order, so the copy already comes after the compute;
    // any other source must have finished before its bytes are read.
    if (channels_[copy.from].empty() || channels_[copy.from] != channels_[copy.to]) {
      TENSORPC_RETURN_IF_ERROR(wait(copy.from));
    }
    Status s = copy.dst->buffer->copy(*copy.src, *copy.dst);
    if (s.code() == StatusCode::unsupported) {
      s = sched::copy_through_host(copy);
      ++c.copies_through_host;
    }
    if (!s.ok()) {
      return s.with_context("scheduler: copy of " + plan.info.copies[ci].tensor + " from " +
                            devices_[copy.from]->name() + " to " + devices_[copy.to]->name());
    }
    ++c.copies;
    c.bytes_copied += copy.dst->nbytes();
    return Status();
  };

  Status failed;
  for (size_t i = 0; i < plan.splits.size() && failed.ok(); ++i) {
    sched::Split& split = plan.splits[i];
    if (run_of[i] >= 0) {
      const size_t r = static_cast<size_t>(run_of[i]);
      if (i != runs[r].first_split) continue;  // the plan carries the whole run
      for (size_t ci : direct[r]) {
        failed = make_copy(ci);
        if (!failed.ok()) break;
      }
      if (!failed.ok()) break;
      failed = runners[r]->run_async(specs[r]);
      plan_pending[runs[r].channel] = true;
      if (!failed.ok()) failed = failed.with_context("scheduler: execution plan on " + runs[r].channel);
      for (const auto& step : specs[r].steps) {
        if (step.kind == ExecutionPlanSpec::StepKind::copy || step.kind == ExecutionPlanSpec::StepKind::wait) {
          ++c.copies;
          c.bytes_copied += step.dst->nbytes();
        }
      }
      c.splits_run += runs[r].n_splits;
      ++c.plans_run;
      continue;
    }
    for (size_t ci : split.copies) {
      failed = make_copy(ci);
      if (!failed.ok()) break;
    }
    if (!failed.ok()) break;
    auto st = stream(split.device);
    if (!st.ok()) {
      failed = st.status();
      break;
    }
    Status s = st.value()->compute_async(split.graph);
    pending[split.device] = true;
    if (!s.ok())
      failed = s.with_context("scheduler: split " + std::to_string(i) + " on " + devices_[split.device]->name());
    ++c.splits_run;
  }
  // The read, when asked for and its server ran a plan: one round trip
  // that waits for that server's plans and brings the bytes. Then servers
  // whose last plan ends by sending to it (or to a server so finished) are
  // done too: the bytes they sent were waited for and used.
  Status read_failed;
  bool read_done = false;
  const auto channel_of = [&](const Tensor& t) -> const std::string* {
    for (size_t d = 0; d < devices_.size(); ++d) {
      if (t.buffer != nullptr && &t.buffer->device() == devices_[d]) return &channels_[d];
    }
    return nullptr;
  };
  // `channel`, and every channel whose last plan ends by sending to one of
  // these, found until no more are.
  const auto finished_with = [&](const std::string& channel) {
    std::map<std::string, size_t> last_run;  // per channel that ran a plan
    for (size_t r = 0; r < runs.size(); ++r) {
      if (runners[r] != nullptr) last_run[runs[r].channel] = r;
    }
    std::vector<std::string> done{channel};
    const auto is_done = [&](const std::string& ch) { return std::find(done.begin(), done.end(), ch) != done.end(); };
    for (bool more = true; more;) {
      more = false;
      for (const auto& [ch, r] : last_run) {
        const auto& steps = specs[r].steps;
        if (is_done(ch) || steps.empty() || steps.back().kind != ExecutionPlanSpec::StepKind::send) continue;
        const std::string* to = channel_of(*steps.back().dst);
        if (to != nullptr && is_done(*to)) {
          done.push_back(ch);
          more = true;
        }
      }
    }
    return done;
  };
  if (read != nullptr && failed.ok()) {
    const std::string* channel = channel_of(*read);
    if (channel == nullptr) {
      failed =
          invalid_argument("scheduler: the result to read, " + tensorpc::describe(*read) + ", is not on its devices");
    } else if (auto it = plan_pending.find(*channel); it != plan_pending.end() && it->second) {
      read_failed = runners_[*channel]->synchronize_and_read(*read, read_dst);
      if (read_failed.ok()) {
        read_done = true;
        for (const std::string& ch : finished_with(*channel)) plan_pending[ch] = false;
      } else {
        it->second = false;
        read_failed = read_failed.with_context("scheduler: execution plan on " + *channel);
      }
    }
  }

  // Every result is on its device before returning, and late errors surface:
  // one synchronize per server that ran a plan, one per stream otherwise.
  for (size_t d = 0; d < devices_.size(); ++d) {
    Status s = wait(d);
    if (failed.ok()) failed = s;
  }
  // A server's own error explains a failed read better than the read's.
  if (failed.ok()) failed = read_failed;
  if (failed.ok() && read != nullptr && !read_done) failed = read->buffer->get(*read, read_dst, 0, read->nbytes());

  const auto after = sched::traffic_of(devices_, channels_);
  for (const auto& [channel, a] : after) {
    const auto b = before.find(channel);
    const DeviceTraffic zero;
    const DeviceTraffic& was = b == before.end() ? zero : b->second;
    DeviceTraffic& mine = c.channels[channel];
    mine.channel = channel;
    mine.round_trips = sched::delta(a.round_trips, was.round_trips);
    mine.bytes_sent = sched::delta(a.bytes_sent, was.bytes_sent);
    mine.bytes_received = sched::delta(a.bytes_received, was.bytes_received);
    c.round_trips += mine.round_trips;
    c.bytes_sent += mine.bytes_sent;
    c.bytes_received += mine.bytes_received;
  }
  last_run_ = c;
  totals_ += c;
  return failed;
}

}  // namespace tensorpc
