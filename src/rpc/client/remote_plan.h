// RemotePlanRunner: runs execution plans (tensorpc/execution_plan.h) on one
// tensorpc server, over the connection its devices share.
//
// run_async() encodes the spec — graphs as GRAPH_COMPUTE encodes them, copies
// as (handle, offset) ranges, sends and waits under standing grants — and
// hands it to Connection::send_plan, which stores it on the server. A spec
// with a key (ExecutionPlanSpec::key) seen before is not even encoded again:
// its plan id is remembered with the grants it was encoded under, and it is
// run by id while those grants stand — one frame per run, whose reply is
// read later (settle(), or the next exchange), and which the connection
// stores again should the server have dropped it. synchronize() is the
// one round trip (SYNCHRONIZE) that waits for the plans and returns the
// first error among them; synchronize_and_read() folds that wait into the
// read of a result. Holds a strong reference to its connection.
#pragma once

#include <memory>
#include <vector>

#include "core/lru.h"
#include "rpc/transport/connection.h"
#include "tensorpc/execution_plan.h"

namespace tensorpc::rpc {

class RemotePlanRunner final : public PlanRunner {
 public:
  // `timeout`: each call's, as RemoteOptions::reply_timeout.
  explicit RemotePlanRunner(std::shared_ptr<Connection> connection, std::chrono::milliseconds timeout = {})
      : connection_(std::move(connection)), timeout_(timeout) {}

  Status run_async(const ExecutionPlanSpec& spec) override;
  Status synchronize() override;
  Status settle() override;
  std::optional<Status> try_settle() override;
  // One GET_TENSOR flagged SYNC: the server's pending error, or the bytes;
  // `meanwhile` runs once it is sent.
  Status synchronize_and_read(const Tensor& t, void* dst, const std::function<void()>& meanwhile = {}) override;

 private:
  // A keyed spec once encoded: the plan it was stored as, and the standing
  // grants of its sends and waits, in step order, that the encoding names.
  struct Encoded {
    uint64_t plan_id = 0;
    std::vector<GrantToken> tokens;
  };
  static constexpr size_t kEncodedSpecs = 64;

  StatusOr<std::vector<GrantToken>> hold_grants(const ExecutionPlanSpec& spec);
  // Encodes the spec and hands it to Connection::send_plan; the plan's id.
  StatusOr<uint64_t> encode_and_send(const ExecutionPlanSpec& spec);
  void start_over();

  const std::shared_ptr<Connection> connection_;
  const std::chrono::milliseconds timeout_;
  LruStore<uint64_t, Encoded> encoded_;  // by ExecutionPlanSpec::key
};

}  // namespace tensorpc::rpc
