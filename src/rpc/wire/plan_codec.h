// Execution plans on the wire (docs/protocol.md, "Execution plans"): the
// steps PLAN_STORE carries after its plan_id, each encoded next to its
// decoder. A COMPUTE step's graph follows its fixed fields and is read with
// decode_graph (graph_codec.h), so the server validates it like any graph.
#pragma once

#include <cstdint>
#include <string>

#include "rpc/wire/messages.h"
#include "rpc/wire/wire.h"
#include "tensorpc/status.h"

namespace tensorpc::rpc {

enum class PlanStepKind : uint8_t { compute = 0, copy = 1, send_to_peer = 2, wait_for = 3 };
inline constexpr uint8_t kPlanStepKinds = 4;
// Steps one plan may hold; a larger PLAN_STORE is refused before it is read.
inline constexpr uint32_t kMaxPlanSteps = 4096;
// WAIT_FOR's longest wait: a client cannot park a session for longer.
inline constexpr uint32_t kMaxPlanWaitMs = 10 * 60 * 1000;

// The fixed fields of one step; which are used depends on `kind`.
struct PlanStepFields {
  PlanStepKind kind = PlanStepKind::compute;
  uint32_t device = 0;  // compute
  uint64_t src_handle = 0, src_offset = 0;
  uint64_t dst_handle = 0, dst_offset = 0;  // copy
  uint64_t size = 0;                        // copy, send_to_peer
  std::string endpoint;                     // send_to_peer: the destination; wait_for: the source (for messages)
  GrantToken token{};                       // send_to_peer, wait_for: a standing grant
  uint32_t timeout_ms = 0;                  // wait_for
};

const char* name_of(PlanStepKind kind);

// Writes a step's fixed fields; for COMPUTE the caller appends the graph.
void encode_step(WireWriter& w, const PlanStepFields& s);
// Reads a step's fixed fields (a protocol error naming the step on
// truncation or an unknown kind); for COMPUTE the graph follows in `r`.
Status decode_step(WireReader& r, size_t index, PlanStepFields& s);

}  // namespace tensorpc::rpc
