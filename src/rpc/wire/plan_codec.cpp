// Encoders and decoders of execution plan steps (plan_codec.h).
#include "rpc/wire/plan_codec.h"

#include <cstring>

namespace tensorpc::rpc {

const char* name_of(PlanStepKind kind) {
  switch (kind) {
    case PlanStepKind::compute: return "COMPUTE";
    case PlanStepKind::copy: return "COPY";
    case PlanStepKind::send_to_peer: return "SEND_TO_PEER";
    case PlanStepKind::wait_for: return "WAIT_FOR";
  }
  return "UNKNOWN_STEP";
}

void encode_step(WireWriter& w, const PlanStepFields& s) {
  w.u8(static_cast<uint8_t>(s.kind));
  switch (s.kind) {
    case PlanStepKind::compute: w.u32(s.device); break;
    case PlanStepKind::copy:
      w.u64(s.src_handle);
      w.u64(s.src_offset);
      w.u64(s.dst_handle);
      w.u64(s.dst_offset);
      w.u64(s.size);
      break;
    case PlanStepKind::send_to_peer:
      w.u64(s.src_handle);
      w.u64(s.src_offset);
      w.u64(s.size);
      w.str(s.endpoint);
      w.raw(s.token.data(), s.token.size());
      break;
    case PlanStepKind::wait_for:
      w.raw(s.token.data(), s.token.size());
      w.u32(s.timeout_ms);
      w.str(s.endpoint);
      break;
  }
}

Status decode_step(WireReader& r, size_t index, PlanStepFields& s) {
  const std::string where = "PLAN_STORE request: step " + std::to_string(index) + " ";
  const auto truncated = [&] { return Status(StatusCode::protocol_error, where + "is truncated"); };
  const uint8_t kind = r.u8();
  if (!r.ok()) return truncated();
  if (kind >= kPlanStepKinds) {
    return Status(StatusCode::protocol_error, where + "has unknown kind " + std::to_string(kind));
  }
  s.kind = static_cast<PlanStepKind>(kind);
  const auto token = [&] {
    const auto b = r.raw(s.token.size());
    if (r.ok()) std::memcpy(s.token.data(), b.data(), s.token.size());
  };
  const auto str = [&] {
    const uint32_t n = r.u32();
    if (!r.ok() || n > kMaxWireString) return false;
    const auto b = r.raw(n);
    if (!r.ok()) return false;
    s.endpoint.assign(reinterpret_cast<const char*>(b.data()), b.size());
    return true;
  };
  switch (s.kind) {
    case PlanStepKind::compute: s.device = r.u32(); break;
    case PlanStepKind::copy:
      s.src_handle = r.u64();
      s.src_offset = r.u64();
      s.dst_handle = r.u64();
      s.dst_offset = r.u64();
      s.size = r.u64();
      break;
    case PlanStepKind::send_to_peer:
      s.src_handle = r.u64();
      s.src_offset = r.u64();
      s.size = r.u64();
      if (!str()) return truncated();
      token();
      break;
    case PlanStepKind::wait_for:
      token();
      s.timeout_ms = r.u32();
      if (!str()) return truncated();
      break;
  }
  return r.ok() ? Status() : truncated();
}

}  // namespace tensorpc::rpc
