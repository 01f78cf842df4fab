// RemotePlanRunner: runs execution plans (tensorpc/execution_plan.h) on one
// tensorpc server, over the connection its devices share.
//
// run_async() encodes the spec — graphs as GRAPH_COMPUTE encodes them, copies
// as (handle, offset) ranges, sends and waits under standing grants — and
// hands it to Connection::send_plan, which stores it on the server once and
// afterwards runs it by id: one one-way frame per run. synchronize() is the
// one round trip (SYNCHRONIZE) that waits for the plans and returns the
// first error among them. Holds a strong reference to its connection.
#pragma once

#include <memory>

#include "rpc/connection.h"
#include "tensorpc/execution_plan.h"

namespace tensorpc::rpc {

class RemotePlanRunner final : public PlanRunner {
 public:
  // `timeout`: each call's, as RemoteOptions::reply_timeout.
  explicit RemotePlanRunner(std::shared_ptr<Connection> connection, std::chrono::milliseconds timeout = {})
      : connection_(std::move(connection)), timeout_(timeout) {}

  Status run_async(const ExecutionPlanSpec& spec) override;
  Status synchronize() override;

 private:
  const std::shared_ptr<Connection> connection_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace tensorpc::rpc
