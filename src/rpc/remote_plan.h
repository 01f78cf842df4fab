// RemotePlanRunner: runs execution plans (tensorpc/execution_plan.h) on one
// tensorpc server, over the connection its devices share.
//
// run_async() encodes the spec — graphs as GRAPH_COMPUTE encodes them, copies
// as (handle, offset) ranges, sends and waits under standing grants — and
// hands it to Connection::send_plan, which stores it on the server once and
// afterwards runs it by id: one one-way frame per run. synchronize() is the
// one round trip (SYNCHRONIZE) that waits for the plans and returns the
// first error among them; synchronize_and_read() folds that wait into the
// read of a result. Holds a strong reference to its connection.
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
  // One GET_TENSOR flagged SYNC: the server's pending error, or the bytes.
  Status synchronize_and_read(const Tensor& t, void* dst) override;

 private:
  void start_over();

  const std::shared_ptr<Connection> connection_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace tensorpc::rpc
