// SessionBuffers: the buffers one session allocated, and the streams it
// computes with on them.
//
// It owns the session's BufferTable, whose handles (u64, issued here, never 0,
// never reused) are all the client ever sees of a buffer: every use is checked
// against the table, range included. It enforces the session's limits
// (SessionEnv::max_session_memory, max_session_buffers) at allocation, keeps
// the server's buffer counters, and creates one stream per device on first
// use. release_all() frees everything when the session ends.
//
// The table is shared with the server's WriteGrants: a WRITE_GRANTED served
// by another session writes into a buffer this session granted. So every
// change and every lookup holds the table's mutex, and entries are shared
// (see write_grants.h). Only the owning session's thread adds or removes
// entries, so an entry found here stays valid until that thread frees it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rpc/server/session_env.h"
#include "rpc/server/write_grants.h"
#include "rpc/wire/graph_codec.h"
#include "tensorpc/device.h"
#include "tensorpc/graph.h"

namespace tensorpc::rpc {

class SessionBuffers {
 public:
  explicit SessionBuffers(const SessionEnv& env);
  SessionBuffers(const SessionBuffers&) = delete;
  SessionBuffers& operator=(const SessionBuffers&) = delete;

  // Shared with the server's WriteGrants (a grant names it weakly).
  const std::shared_ptr<BufferTable>& table() const { return table_; }

  Status check_device(uint32_t device) const;
  // A new buffer of `size` bytes on `device` (already checked), within the
  // session's limits and the device's largest allocation; its handle.
  StatusOr<uint64_t> allocate(uint32_t device, uint64_t size);
  // Frees the buffer of `handle`, which find() has just found.
  void free(uint64_t handle);
  StatusOr<BufferEntry*> find(uint64_t handle);
  // How a graph to run on `device` names its buffers (decode_graph): each
  // handle must be a buffer of this session on that device; those resolved
  // are added to `used`.
  ResolveHandle resolver(uint32_t device, std::vector<uint64_t>& used);
  // The buffer of handle, checked to hold bytes [offset, offset + size).
  StatusOr<BufferEntry*> find_range(uint64_t handle, uint64_t offset, uint64_t size, const char* what);
  // Copies between two of the session's buffers (COPY_TENSOR, a plan's copy).
  Status copy_range(uint64_t src_handle, uint64_t src_offset, uint64_t dst_handle, uint64_t dst_offset, uint64_t size);
  // The largest buffer ever allocated: bounds SET_TENSOR payloads.
  uint64_t largest_buffer() const { return largest_buffer_; }
  // How many buffers the session holds, and their bytes.
  struct Held {
    size_t buffers = 0;
    uint64_t bytes = 0;
  };
  Held held() const;

  // Runs `graph` on `device` (already checked) in the session's stream there.
  Status compute_on(uint32_t device, Graph& graph);
  // Waits for every stream; the first error.
  Status synchronize();

  // The session has ended: its streams are gone, its grants revoked, its
  // table closed and every buffer freed. Safe to call again.
  void release_all(uint64_t session);

 private:
  // The session's limits (SessionEnv) allow one more buffer of `size` bytes.
  Status check_limits(uint64_t size) const;
  StatusOr<Stream*> stream_of(uint32_t device);

  const SessionEnv& env_;
  const std::shared_ptr<BufferTable> table_ = std::make_shared<BufferTable>();
  uint64_t next_handle_ = 1;
  uint64_t largest_buffer_ = 0;
  uint64_t held_bytes_ = 0;                       // bytes of the buffers in table_
  std::vector<std::unique_ptr<Stream>> streams_;  // by device index, created on first use
};

// Bytes [offset, +size) of an entry (already range-checked), through host
// memory when the buffer has it, else through Buffer::set/get.
Status write_bytes(BufferEntry& entry, uint64_t offset, const uint8_t* src, uint64_t size);
Status read_bytes(BufferEntry& entry, uint64_t offset, uint8_t* dst, uint64_t size);

}  // namespace tensorpc::rpc
