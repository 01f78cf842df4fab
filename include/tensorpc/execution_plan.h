// Execution plans: a run of graph splits that one server carries out across
// its devices by itself, so that only the plan's inputs go in and its
// outputs come out (design.md, "RPC").
//
// ExecutionPlanSpec is the backend's description of such a run — steps in
// order: compute a graph on a device, copy a tensor between two devices of
// the server, send a tensor to a device of another server, wait for a
// tensor another server sends here. A PlanRunner, made by a device that can
// run plans (Device::create_plan_runner), starts a spec on its server and
// returns before it is done; synchronize() waits and returns the first error.
// A runner stores an unchanged spec on the server once and afterwards only
// names it, so a plan re-run every decode step costs one small request. A
// spec with a key lets the runner also skip encoding it again (see `key`).
//
// A SEND step on one runner and the WAIT step for the same destination
// tensor on the receiving server's runner form a pair: the receiving side
// blocks until the bytes of this run have arrived (or its timeout passes).
// The sender's plan must be started before, or while, the receiver waits.
//
// Ownership: the spec only points at the caller's graphs and tensors; they
// must stay valid (and keep their bytes placed) while a run is in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tensorpc/graph.h"
#include "tensorpc/status.h"
#include "tensorpc/tensor.h"

namespace tensorpc {

class Device;

struct ExecutionPlanSpec {
  enum class StepKind { compute, copy, send, wait };
  struct Step {
    StepKind kind = StepKind::compute;
    Device* device = nullptr;     // compute: the device of the server that runs it
    Graph* graph = nullptr;       // compute
    const Tensor* src = nullptr;  // copy, send: bytes on this server; wait: on the sender's
    const Tensor* dst = nullptr;  // copy: on this server; send, wait: on the receiving server
  };
  std::vector<Step> steps;
  // How long a WAIT step waits for its bytes before the plan fails.
  uint32_t wait_timeout_ms = 30000;
  // Nonzero: the caller's promise that every spec it gives the same key has
  // the same steps over the same graphs and tensors, with descriptors and
  // placements unchanged (only the bytes in them differ), so a runner may
  // reuse what it made of the first — the encoding, the plan stored on its
  // server. A placement that changes must come with a new key. 0: no promise.
  uint64_t key = 0;

  void compute(Device& d, Graph& g) { steps.push_back({StepKind::compute, &d, &g, nullptr, nullptr}); }
  void copy(const Tensor& src, const Tensor& dst) { steps.push_back({StepKind::copy, nullptr, nullptr, &src, &dst}); }
  void send(const Tensor& src, const Tensor& dst) { steps.push_back({StepKind::send, nullptr, nullptr, &src, &dst}); }
  void wait(const Tensor& src, const Tensor& dst) { steps.push_back({StepKind::wait, nullptr, nullptr, &src, &dst}); }
};

class PlanRunner {
 public:
  virtual ~PlanRunner() = default;
  PlanRunner(const PlanRunner&) = delete;
  PlanRunner& operator=(const PlanRunner&) = delete;

  // Starts the spec on the server; may return before it has run.
  virtual Status run_async(const ExecutionPlanSpec& spec) = 0;
  // Waits for every plan started so far; returns the first error among them.
  virtual Status synchronize() = 0;
  // Makes sure every plan started so far is under way: one the server had
  // to be sent again is sent now. Call it before waiting on another server
  // whose plan needs this one's bytes. An error when a plan could not be
  // started; by default nothing to do.
  virtual Status settle() { return Status(); }
  // settle(), unless another thread is using the server's connection: then
  // nothing (nullopt), and that thread settles it first.
  virtual std::optional<Status> try_settle() { return settle(); }
  // synchronize(), then reads all of t — a tensor in a buffer of this
  // runner's server — into dst; in one round trip where the server can. On
  // an error dst holds nothing of use. `meanwhile`, when given, runs once
  // while the reply is on its way (settling the other servers this one
  // waits for: try_settle(), never a wait for another runner's lock).
  virtual Status synchronize_and_read(const Tensor& t, void* dst, const std::function<void()>& meanwhile = {});

 protected:
  PlanRunner() = default;
};

}  // namespace tensorpc
