// Scheduler::describe: the last plan in words, for debugging and
// TENSORPC_SCHED_DEBUG=1. Owned by the backend layer.
#include <cstdio>
#include <string>

#include "backend/scheduler_plan.h"

namespace tensorpc {
namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string bytes_text(uint64_t b) { return std::to_string(b) + " B"; }

}  // namespace

std::string Scheduler::describe() const {
  if (last_ == nullptr) return "scheduler: no plan yet\n";
  const sched::Plan& plan = *last_;
  const SchedulePlanInfo& info = plan.info;
  const auto dev = [this](size_t d) {
    std::string s = std::to_string(d);  // appended piecewise: GCC 12 misreads "[" + string as overlapping
    s.insert(s.begin(), '[');
    s += "] ";
    return s + devices_[d]->name();
  };
  uint64_t copied = 0;
  for (const auto& c : info.copies) copied += c.bytes;

  std::string s = "scheduler plan " + hex(info.hash) + ": " + std::to_string(info.node_device.size()) + " nodes, " +
                  std::to_string(info.leaf_device.size()) + " leaves, " + std::to_string(info.splits.size()) +
                  " splits, " + std::to_string(info.copies.size()) + " copies (" + bytes_text(copied) + ")\n";
  s += "devices:\n";
  for (size_t d = 0; d < devices_.size(); ++d) {
    s += "  " + dev(d) + " (" + to_string(devices_[d]->kind()) + ")";
    if (d < info.device_bytes.size() && info.device_bytes[d]) s += ", graph memory " + bytes_text(info.device_bytes[d]);
    s += "\n";
  }
  s += "leaves:\n";
  for (size_t i = 0; i < info.leaf_device.size(); ++i) {
    s += "  " + plan.labels[i] + " -> " + dev(static_cast<size_t>(info.leaf_device[i])) + "\n";
  }
  s += "nodes:\n";
  for (size_t i = 0; i < info.node_device.size(); ++i) {
    s +=
        "  " + plan.labels[info.leaf_device.size() + i] + " -> " + dev(static_cast<size_t>(info.node_device[i])) + "\n";
  }
  s += "splits:\n";
  for (size_t i = 0; i < info.splits.size(); ++i) {
    const auto& sp = info.splits[i];
    s += "  split " + std::to_string(i) + ": " + dev(sp.device) + ", nodes " + std::to_string(sp.first_node) + ".." +
         std::to_string(sp.last_node) + ", " + std::to_string(sp.n_nodes) + " computed";
    s += sp.copies.empty()
             ? "\n"
             : ", boundary: " + std::to_string(sp.copies.size()) + " copies, " + bytes_text(sp.copy_bytes) + "\n";
    for (size_t ci : sp.copies) {
      const auto& c = info.copies[ci];
      s += "    copy " + c.tensor + ": " + dev(c.from) + " -> " + dev(c.to) + ", " + bytes_text(c.bytes) +
           (c.before_run ? ", ready before the run" : "") + "\n";
    }
  }
  if (!info.server_runs.empty()) {
    s += "server runs:\n";
    for (const auto& r : info.server_runs) {
      s += "  " + r.channel + ": splits " + std::to_string(r.first_split) + ".." +
           std::to_string(r.first_split + r.n_splits - 1) + "\n";
    }
  }
  const SchedulerCounters& c = last_run_;
  s += "last run: " + std::to_string(c.splits_run) + " splits, " + std::to_string(c.copies) + " copies (" +
       std::to_string(c.copies_through_host) + " through the host), " + bytes_text(c.bytes_copied) +
       " copied; client traffic " + std::to_string(c.round_trips) + " round trips, " + bytes_text(c.bytes_sent) +
       " sent, " + bytes_text(c.bytes_received) + " received\n";
  return s;
}

}  // namespace tensorpc
