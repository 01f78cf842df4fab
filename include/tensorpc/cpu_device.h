// The CPU device: buffers in host memory, a thread pool, SIMD kernels.
//
// Each CpuDevice has its own thread pool and its own memory accounting, so
// several of them in one process behave like separate devices (a server can
// expose `cpu:2 cpu:2`). Graphs run on the pool; a stream's async calls run
// to completion before they return, which the Stream contract allows.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensorpc/device.h"

namespace tensorpc {

namespace cpu {
class HostMemoryPool;
class ThreadPool;
struct KernelTable;
}  // namespace cpu

struct CpuDeviceOptions {
  std::string name = "cpu";
  int threads = 0;                // 0: every hardware thread
  uint64_t memory_limit = 0;      // bytes; 0: only the host's available memory limits
  bool portable_kernels = false;  // use the portable kernels even where SIMD ones run
  // Graphs whose nodes average less work than this (multiply-adds for
  // mul_mat and mul_mat_id, elements written otherwise) run on the calling
  // thread alone: for them a barrier per node costs more than the threads
  // save. 0: always use every thread (tests of the threaded kernels).
  double min_work_per_node_for_threads = 32768;
  // Thread i of the device runs on core i (mod the cores there are), the
  // calling thread on core 0 while it computes. Devices that take turns on
  // the same cores — the stages of a pipeline on one machine — then find
  // their threads where the last stage's were, instead of two of them woken
  // onto one core while another idles. For a machine whose cores the
  // devices have to themselves; off by default.
  bool pin_threads = false;
  // Threads to share with other devices (CpuDevice::shared_threads) instead
  // of threads of its own; `threads` and `pin_threads` are then theirs. The
  // devices sharing them compute one graph at a time among them. Made for
  // devices that take turns on the same cores anyway (pinned stages of one
  // pipeline): a stage finds the threads the stage before it used still
  // awake, instead of waking threads of its own from sleep.
  std::shared_ptr<cpu::ThreadPool> shared_threads = nullptr;
  // How long the mapping of a freed buffer of 2 MiB or more is kept for the
  // next allocation of about its size (zeroed before it is handed out): a
  // model reloaded right after it was freed then fills memory the process
  // already has instead of fresh pages. 0: unmapped at once.
  int keep_freed_memory_ms = 5000;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(CpuDeviceOptions options = {});
  ~CpuDevice() override;

  std::string name() const override { return options_.name; }
  std::string description() const override;
  DeviceKind kind() const override { return DeviceKind::cpu; }
  StatusOr<MemoryInfo> memory() const override;  // never an error
  uint64_t alignment() const override { return 64; }
  uint64_t max_allocation() const override;
  bool supports(const Tensor& node) const override;

  StatusOr<std::unique_ptr<Buffer>> allocate(uint64_t size) override;
  StatusOr<std::unique_ptr<Stream>> create_stream() override;

  // Threads for CpuDeviceOptions::shared_threads: `threads` of them (0:
  // every hardware thread), pinned to cores as pin_threads says.
  static std::shared_ptr<cpu::ThreadPool> shared_threads(int threads, bool pin_threads);

  int threads() const;
  void set_threads(int threads);
  const cpu::KernelTable& kernels() const { return *kernels_; }
  // Bytes currently allocated in buffers of this device.
  uint64_t allocated() const { return allocated_.load(); }

  // Runs g on the pool; tensors must be host-addressable. Used by streams;
  // callers on several threads are served one graph at a time.
  Status compute(Graph& g);

 private:
  friend class CpuBuffer;
  void release(uint64_t bytes) { allocated_ -= bytes; }

  CpuDeviceOptions options_;
  const cpu::KernelTable* kernels_;
  std::atomic<uint64_t> allocated_{0};
  std::mutex compute_mutex_;                    // one graph at a time on the pool
  std::shared_ptr<cpu::ThreadPool> pool_;       // its own, or shared with other devices
  std::unique_ptr<cpu::HostMemoryPool> freed_;  // outlives every buffer (they return their memory to it)
  std::vector<char> work_;                      // scratch shared by a graph's nodes, grown as needed
};

}  // namespace tensorpc
