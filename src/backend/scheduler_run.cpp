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
#include <unordered_set>
#include <vector>

#include "backend/scheduler_plan.h"

namespace tensorpc {
namespace sched {

namespace {

// Traffic per server, each server once.
std::map<ExecutorId, DeviceTraffic> traffic_of(const std::vector<Device*>& devices,
                                               const std::vector<ExecutorId>& executors) {
  std::map<ExecutorId, DeviceTraffic> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!executors[i].is_local() && !out.count(executors[i])) out.emplace(executors[i], devices[i]->traffic());
  }
  return out;
}

// after - before, where a counter that went down (a new connection) counts from zero.
uint64_t delta(uint64_t after, uint64_t before) { return after >= before ? after - before : after; }

// Each server's traffic between two snapshots, into c: per server and summed.
void count_traffic(const std::map<ExecutorId, DeviceTraffic>& before, const std::map<ExecutorId, DeviceTraffic>& after,
                   SchedulerCounters& c) {
  for (const auto& [server, a] : after) {
    const auto b = before.find(server);
    const DeviceTraffic zero;
    const DeviceTraffic& was = b == before.end() ? zero : b->second;
    DeviceTraffic& mine = c.channels[server.name()];
    mine.channel = server.name();
    mine.round_trips = delta(a.round_trips, was.round_trips);
    mine.bytes_sent = delta(a.bytes_sent, was.bytes_sent);
    mine.bytes_received = delta(a.bytes_received, was.bytes_received);
    c.round_trips += mine.round_trips;
    c.bytes_sent += mine.bytes_sent;
    c.bytes_received += mine.bytes_received;
  }
}

// The copy through this process, for pairs of buffers that cannot copy directly.
Status copy_through_host(const BoundaryCopy& c) {
  std::vector<char> bytes(c.src->nbytes());
  TENSORPC_RETURN_IF_ERROR(c.src->buffer->get(*c.src, bytes.data(), 0, bytes.size()));
  return c.dst->buffer->set(*c.dst, bytes.data(), 0, bytes.size());
}

}  // namespace
}  // namespace sched

// One run of a plan. Made in two steps: which server runs are handed over
// as execution plans, and each one's spec; then run(): the splits issued in
// order, the result read, every stream and server waited for. It counts
// what it did in counters(), whether or not it failed.
class Scheduler::Execution {
 public:
  Execution(Scheduler& s, sched::Plan& plan)
      : s_(s),
        plan_(plan),
        run_of_(plan.splits.size(), -1),
        server_runs_(plan.info.server_runs.size()),
        stream_pending_(s.devices_.size(), false) {
    counters_.runs = 1;
    choose_runners();
    build_specs();
  }

  // Issues every split, then waits for all of them; reads `read` into
  // `read_dst` when given (see Scheduler::compute_and_read).
  Status run(const Tensor* read, void* read_dst);
  const SchedulerCounters& counters() const { return counters_; }

 private:
  // A server run (SchedulePlanInfo::server_runs) as this run carries it out.
  struct ServerRun {
    ExecutorId server;
    PlanRunner* runner = nullptr;  // null: split by split
    ExecutionPlanSpec spec;
    std::vector<size_t> direct;  // copies this process makes before the plan starts
    size_t early_sends = 0;      // sends the spec makes first thing
    uint64_t weights_read = 0;   // by the spec's computations
  };

  void choose_runners();
  void build_specs();
  void add_copy(size_t r, size_t ci);
  ServerRun* latest_plan_before(const ExecutorId& server, size_t r);

  Status issue_splits();
  Status issue_plan(size_t r);
  Status issue_split(size_t i);
  Status make_copy(size_t ci);
  Status wait(size_t device);

  Status read_through_plan(const ExecutorId& server, const Tensor& t, void* dst);
  std::vector<ExecutorId> finished_with(const ExecutorId& server) const;
  const ExecutorId* executor_of(const Tensor& t) const;

  Scheduler& s_;
  sched::Plan& plan_;
  std::vector<int> run_of_;  // per split: the server run whose plan carries it out, -1: none
  std::vector<ServerRun> server_runs_;
  std::vector<bool> stream_pending_;              // per device: computes issued, not yet waited for
  std::unordered_set<ExecutorId> plans_pending_;  // servers with plans started, not yet waited for
  SchedulerCounters counters_;
};

// A server run whose server runs execution plans is handed over whole; the
// others run split by split.
void Scheduler::Execution::choose_runners() {
  const auto& runs = plan_.info.server_runs;
  for (size_t r = 0; r < runs.size(); ++r) {
    ServerRun& run = server_runs_[r];
    const size_t device = plan_.splits[runs[r].first_split].device;
    run.server = s_.executors_[device];
    if (!s_.options_.execution_plans) continue;
    run.runner = s_.runner(run.server, device);
    if (run.runner == nullptr) continue;
    for (size_t i = 0; i < runs[r].n_splits; ++i) run_of_[runs[r].first_split + i] = static_cast<int>(r);
  }
}

// The specs, built from the splits in order, so a run's sends come after the
// computes of its splits that produce them.
void Scheduler::Execution::build_specs() {
  for (size_t r = 0; r < server_runs_.size(); ++r) {
    ExecutionPlanSpec& spec = server_runs_[r].spec;
    spec.wait_timeout_ms = s_.options_.plan_wait_timeout_ms;
    // The same plan in the same placement makes the same specs: their
    // runners need not encode them again. Keys of up to 2^20 runs per plan.
    if (r < (size_t{1} << 20)) spec.key = (plan_.placement << 20) | (r + 1);
  }
  for (size_t i = 0; i < plan_.splits.size(); ++i) {
    if (run_of_[i] < 0) continue;
    const size_t r = static_cast<size_t>(run_of_[i]);
    sched::Split& split = plan_.splits[i];
    for (size_t ci : split.copies) add_copy(r, ci);
    server_runs_[r].spec.compute(*s_.devices_[split.device], split.graph);
    server_runs_[r].weights_read += split.weight_bytes;
  }
}

// Boundary copy ci, read by a split of server run r: a copy step when its
// source is on r's server. From another server, it is sent by that server's
// latest plan before r (which ran after the source's bytes were made) and
// waited for in r; else this process makes it before r's plan starts.
void Scheduler::Execution::add_copy(size_t r, size_t ci) {
  const sched::BoundaryCopy& copy = plan_.copies[ci];
  ServerRun& run = server_runs_[r];
  const ExecutorId& from = s_.executors_[copy.from];
  if (from == run.server) {
    run.spec.copy(*copy.src, *copy.dst);
    return;
  }
  ServerRun* sender = latest_plan_before(from, r);
  if (sender == nullptr) {
    run.direct.push_back(ci);
    return;
  }
  // Bytes in place before the run (inputs) of a sender that computes little
  // are sent before its computations (SchedulerOptions::early_inputs_below_bytes).
  auto& steps = sender->spec.steps;
  sender->spec.send(*copy.src, *copy.dst);
  if (copy.before_run && sender->weights_read < s_.options_.early_inputs_below_bytes) {
    std::rotate(steps.begin() + static_cast<std::ptrdiff_t>(sender->early_sends), steps.end() - 1, steps.end());
    ++sender->early_sends;
  }
  run.spec.wait(*copy.src, *copy.dst);
}

// The latest server run before r that `server` carries out as a plan; null
// when there is none (always for this process).
Scheduler::Execution::ServerRun* Scheduler::Execution::latest_plan_before(const ExecutorId& server, size_t r) {
  if (server.is_local()) return nullptr;
  for (size_t q = r; q-- > 0;) {
    if (server_runs_[q].server == server && server_runs_[q].runner != nullptr) return &server_runs_[q];
  }
  return nullptr;
}

Status Scheduler::Execution::run(const Tensor* read, void* read_dst) {
  Status failed = issue_splits();
  // The read, when asked for and its server ran a plan: one round trip
  // that waits for that server's plans and brings the bytes.
  Status read_failed;
  bool read_done = false;
  if (read != nullptr && failed.ok()) {
    const ExecutorId* server = executor_of(*read);
    if (server == nullptr) {
      failed =
          invalid_argument("scheduler: the result to read, " + tensorpc::describe(*read) + ", is not on its devices");
    } else if (plans_pending_.count(*server)) {
      read_failed = read_through_plan(*server, *read, read_dst);
      read_done = read_failed.ok();
    }
  }
  // Every result is on its device before returning, and late errors surface:
  // one synchronize per server that ran a plan, one per stream otherwise.
  for (size_t d = 0; d < s_.devices_.size(); ++d) {
    Status s = wait(d);
    if (failed.ok()) failed = s;
  }
  // A server's own error explains a failed read better than the read's.
  if (failed.ok()) failed = read_failed;
  if (failed.ok() && read != nullptr && !read_done) failed = read->buffer->get(*read, read_dst, 0, read->nbytes());
  return failed;
}

// The splits in order, up to the first error: a handed-over server run as its
// plan, at its first split; any other split by itself.
Status Scheduler::Execution::issue_splits() {
  for (size_t i = 0; i < plan_.splits.size(); ++i) {
    if (run_of_[i] < 0) {
      TENSORPC_RETURN_IF_ERROR(issue_split(i));
    } else if (const size_t r = static_cast<size_t>(run_of_[i]); i == plan_.info.server_runs[r].first_split) {
      TENSORPC_RETURN_IF_ERROR(issue_plan(r));
    }
  }
  return Status();
}

// The copies the plan of server run r needs from this process, then the
// plan, started on its server.
Status Scheduler::Execution::issue_plan(size_t r) {
  ServerRun& run = server_runs_[r];
  for (size_t ci : run.direct) TENSORPC_RETURN_IF_ERROR(make_copy(ci));
  Status s = run.runner->run_async(run.spec);
  plans_pending_.insert(run.server);
  for (const auto& step : run.spec.steps) {
    if (step.kind == ExecutionPlanSpec::StepKind::copy || step.kind == ExecutionPlanSpec::StepKind::wait) {
      ++counters_.copies;
      counters_.bytes_copied += step.dst->nbytes();
    }
  }
  counters_.splits_run += plan_.info.server_runs[r].n_splits;
  ++counters_.plans_run;
  counters_.early_sends += run.early_sends;
  return s.ok() ? s : s.with_context("scheduler: execution plan on " + run.server.name());
}

// Split i's copies, then its graph, started on its device's stream.
Status Scheduler::Execution::issue_split(size_t i) {
  sched::Split& split = plan_.splits[i];
  for (size_t ci : split.copies) TENSORPC_RETURN_IF_ERROR(make_copy(ci));
  auto stream = s_.stream(split.device);
  if (!stream.ok()) return stream.status();
  Status s = stream.value()->compute_async(split.graph);
  stream_pending_[split.device] = true;
  ++counters_.splits_run;
  if (!s.ok()) {
    return s.with_context("scheduler: split " + std::to_string(i) + " on " + s_.devices_[split.device]->name());
  }
  return Status();
}

// Boundary copy ci, made from this process: by the destination's buffer,
// else through this process.
Status Scheduler::Execution::make_copy(size_t ci) {
  const sched::BoundaryCopy& copy = plan_.copies[ci];
  // A device of the destination's server runs every command in order, so
  // the copy already comes after the compute; any other source must have
  // finished before its bytes are read.
  if (!s_.executors_[copy.from].same_server(s_.executors_[copy.to])) TENSORPC_RETURN_IF_ERROR(wait(copy.from));
  Status s = copy.dst->buffer->copy(*copy.src, *copy.dst);
  if (s.code() == StatusCode::unsupported) {
    s = sched::copy_through_host(copy);
    ++counters_.copies_through_host;
  }
  if (!s.ok()) {
    return s.with_context("scheduler: copy of " + plan_.info.copies[ci].tensor + " from " +
                          s_.devices_[copy.from]->name() + " to " + s_.devices_[copy.to]->name());
  }
  ++counters_.copies;
  counters_.bytes_copied += copy.dst->nbytes();
  return Status();
}

// Waits for what was started on a device: its server's plans, then its stream.
Status Scheduler::Execution::wait(size_t device) {
  const ExecutorId& server = s_.executors_[device];
  if (plans_pending_.erase(server) > 0) {
    Status s = s_.runners_.at(server)->synchronize();
    if (!s.ok()) return s.with_context("scheduler: execution plan on " + server.name());
  }
  if (!stream_pending_[device]) return Status();
  stream_pending_[device] = false;
  Status s = s_.slots_[device]->stream->synchronize();
  return s.ok() ? s : s.with_context("scheduler: on " + s_.devices_[device]->name());
}

// Reads t from `server`, which ran a plan, in the round trip that waits for
// its plans. Then servers whose last plan ends by sending to it (or to a
// server so finished) are done too: the bytes they sent were waited for and
// used.
Status Scheduler::Execution::read_through_plan(const ExecutorId& server, const Tensor& t, void* dst) {
  // The other servers' plans are made sure of (settled), in the order they
  // run, while the read is on its way: one a server had dropped is sent
  // again, and the read's server, waiting for its bytes, gets them. Settling
  // them before sending the read cost a round trip to the first server
  // before the read left: a fourth one-way hop in a step over two servers.
  // A server whose connection another thread holds is settled by that
  // thread; its plans stay pending here, for wait() to see through.
  Status settled;
  std::vector<ExecutorId> busy;
  const auto settle_others = [&] {
    for (const ServerRun& run : server_runs_) {
      if (run.runner == nullptr || run.server == server || plans_pending_.count(run.server) == 0) continue;
      const std::optional<Status> s = run.runner->try_settle();
      if (!s) {
        busy.push_back(run.server);
      } else if (!s->ok() && settled.ok()) {
        settled = s->with_context("scheduler: execution plan on " + run.server.name());
      }
    }
  };
  Status s = s_.runners_.at(server)->synchronize_and_read(t, dst, settle_others);
  if (!settled.ok()) return settled;
  if (!s.ok()) {
    plans_pending_.erase(server);
    return s.with_context("scheduler: execution plan on " + server.name());
  }
  for (const ExecutorId& done : finished_with(server)) {
    if (std::find(busy.begin(), busy.end(), done) == busy.end()) plans_pending_.erase(done);
  }
  return Status();
}

// `server`, and every server whose last plan ends by sending to one of
// these, found until no more are.
std::vector<ExecutorId> Scheduler::Execution::finished_with(const ExecutorId& server) const {
  std::map<ExecutorId, size_t> last_plan;  // per server that ran a plan: its last server run
  for (size_t r = 0; r < server_runs_.size(); ++r) {
    if (server_runs_[r].runner != nullptr) last_plan[server_runs_[r].server] = r;
  }
  std::vector<ExecutorId> done{server};
  const auto is_done = [&](const ExecutorId& e) { return std::find(done.begin(), done.end(), e) != done.end(); };
  for (bool more = true; more;) {
    more = false;
    for (const auto& [e, r] : last_plan) {
      const auto& steps = server_runs_[r].spec.steps;
      if (is_done(e) || steps.empty() || steps.back().kind != ExecutionPlanSpec::StepKind::send) continue;
      const ExecutorId* to = executor_of(*steps.back().dst);
      if (to != nullptr && is_done(*to)) {
        done.push_back(e);
        more = true;
      }
    }
  }
  return done;
}

// Who runs the device t's bytes are on; null when that is none of ours.
const ExecutorId* Scheduler::Execution::executor_of(const Tensor& t) const {
  for (size_t d = 0; d < s_.devices_.size(); ++d) {
    if (t.buffer != nullptr && &t.buffer->device() == s_.devices_[d]) return &s_.executors_[d];
  }
  return nullptr;
}

StatusOr<Stream*> Scheduler::stream(size_t device) {
  sched::DeviceSlot& slot = *slots_[device];
  if (!slot.stream) {
    auto s = devices_[device]->create_stream();
    if (!s.ok()) return s.status().with_context("scheduler: stream on " + devices_[device]->name());
    slot.stream = std::move(s).value();
  }
  return slot.stream.get();
}

PlanRunner* Scheduler::runner(const ExecutorId& server, size_t device) {
  auto it = runners_.find(server);
  if (it == runners_.end()) {
    auto made = devices_[device]->create_plan_runner();
    it = runners_.emplace(server, made.ok() ? std::move(made).value() : nullptr).first;
  }
  return it->second.get();
}

Status Scheduler::run(sched::Plan& plan, const Tensor* read, void* read_dst) {
  const auto before = sched::traffic_of(devices_, executors_);
  Execution execution(*this, plan);
  const Status s = execution.run(read, read_dst);
  SchedulerCounters c = execution.counters();
  sched::count_traffic(before, sched::traffic_of(devices_, executors_), c);
  last_run_ = c;
  totals_ += c;
  return s;
}

}  // namespace tensorpc
