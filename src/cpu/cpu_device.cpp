// CpuDevice, its buffers (host memory, huge pages for large ones) and its stream.
#include "tensorpc/cpu_device.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "backend/first_error.h"
#include "core/format.h"
#include "cpu/barrier.h"
#include "cpu/barrier_plan.h"
#include "cpu/host_memory.h"
#include "cpu/kernels.h"
#include "cpu/op_kernels.h"
#include "cpu/thread_pool.h"

namespace tensorpc {
namespace {

// MemAvailable from /proc/meminfo, or physical memory where that is missing.
MemoryInfo host_memory() {
  MemoryInfo info;
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  info.total = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * page;
  info.free = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") {
      info.free = kib * 1024;
      break;
    }
  }
  return info;
}

// The Status for a kernel that threw while computing node.
Status kernel_failure(const std::exception_ptr& failure, const Tensor& node) {
  const std::string what = "compute: " + std::string(name_of(node.op)) + " " + describe(node);
  try {
    std::rethrow_exception(failure);
  } catch (const std::bad_alloc&) {
    return out_of_memory(what + ": its kernel's scratch does not fit in host memory");
  } catch (const Error& e) {
    return e.status().with_context(what);
  } catch (const std::exception& e) {
    return internal_error(what + ": " + e.what());
  }
}

// Multiply-adds of mul_mat and mul_mat_id nodes, elements written by the
// others, averaged over the nodes that compute.
double average_node_work(const Graph& g) {
  double work = 0;
  size_t computing = 0;
  for (const Tensor* n : g.nodes()) {
    if (n->op == Op::none || is_view_op(n->op)) continue;
    ++computing;
    if (n->op == Op::mul_mat || n->op == Op::mul_mat_id) {
      work += static_cast<double>(n->src[0]->ne[0]) * static_cast<double>(n->nelements());
    } else {
      work += static_cast<double>(n->nelements());
    }
  }
  return computing ? work / static_cast<double>(computing) : 0.0;
}

}  // namespace

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(CpuDevice& device, cpu::HostMemory bytes, uint64_t size, uint64_t accounted)
      : device_(device), bytes_(std::move(bytes)), size_(size), accounted_(accounted) {}
  ~CpuBuffer() override {
    device_.release(accounted_);
    device_.freed_->give(std::move(bytes_));
  }

  Device& device() const override { return device_; }
  uint64_t size() const override { return size_; }
  void* host_base() const override { return bytes_.data(); }

  Status set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override {
    TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "set"));
    if (size) std::memcpy(bytes_.data() + t.offset + offset, src, size);
    return Status();
  }

  Status get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const override {
    TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "get"));
    if (size) std::memcpy(dst, bytes_.data() + t.offset + offset, size);
    return Status();
  }

  Status clear(uint8_t value) override {
    std::memset(bytes_.data(), value, size_);
    return Status();
  }

  Status copy(const Tensor& src, const Tensor& dst) override {
    TENSORPC_RETURN_IF_ERROR(check_range(dst, 0, dst.nbytes(), "copy"));
    if (src.nbytes() != dst.nbytes()) {
      return invalid_argument("copy: " + describe(src) + " and " + describe(dst) + " differ in size");
    }
    if (src.data == nullptr) return unsupported("copy: the source " + describe(src) + " is not in host memory");
    std::memmove(bytes_.data() + dst.offset, src.data, dst.nbytes());
    return Status();
  }

 private:
  CpuDevice& device_;
  cpu::HostMemory bytes_;
  uint64_t size_;
  uint64_t accounted_;
};

namespace {

// Runs everything at once on the device: the CPU has no queue to hide.
class CpuStream final : public Stream {
 public:
  explicit CpuStream(CpuDevice& device) : device_(device) {}

  Device& device() const override { return device_; }
  Status compute_async(Graph& g) override { return remember(device_.compute(g)); }
  Status set_async(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override {
    if (t.buffer == nullptr) return remember(invalid_argument("set: " + describe(t) + " is not placed"));
    return remember(t.buffer->set(t, src, offset, size));
  }
  Status get_async(const Tensor& t, void* dst, uint64_t offset, uint64_t size) override {
    if (t.buffer == nullptr) return remember(invalid_argument("get: " + describe(t) + " is not placed"));
    return remember(t.buffer->get(t, dst, offset, size));
  }
  Status synchronize() override {
    return pending_.take();
  }

 private:
  Status remember(Status s) { return pending_.remember(std::move(s)); }

  CpuDevice& device_;
  FirstError pending_;
};

}  // namespace

CpuDevice::CpuDevice(CpuDeviceOptions options)
    : options_(std::move(options)),
      kernels_(options_.portable_kernels ? &cpu::portable_kernels() : &cpu::best_kernels()) {
  if (options_.shared_threads) {
    pool_ = options_.shared_threads;
    options_.threads = pool_->size();
    options_.pin_threads = pool_->pinned();
  } else {
    pool_ = shared_threads(options_.threads, options_.pin_threads);
  }
  // At most what the device may hold at once (half the host's memory without
  // a limit): kept memory is resident, and MemAvailable no longer counts it.
  const uint64_t keep_at_most = options_.memory_limit ? options_.memory_limit : host_memory().total / 2;
  freed_ =
      std::make_unique<cpu::HostMemoryPool>(std::chrono::milliseconds(options_.keep_freed_memory_ms), keep_at_most);
}

CpuDevice::~CpuDevice() = default;

std::string CpuDevice::description() const {
  std::string d = "CPU, " + std::to_string(threads()) + " threads" + (options_.pin_threads ? " pinned to cores" : "") +
                  ", " + kernels_->name + " kernels";
  if (options_.memory_limit) d += ", limit " + format_bytes(options_.memory_limit);
  return d;
}

StatusOr<MemoryInfo> CpuDevice::memory() const {
  MemoryInfo host = host_memory();
  // Kept mappings of freed buffers are free to this device: their resident
  // pages, which the host's available memory leaves out (it counts the rest).
  host.free = std::min(host.total, host.free + freed_->kept_resident_bytes());
  if (options_.memory_limit == 0) return host;
  const uint64_t used = allocated_.load();
  const uint64_t left = used < options_.memory_limit ? options_.memory_limit - used : 0;
  return MemoryInfo{std::min(left, host.free), options_.memory_limit};
}

uint64_t CpuDevice::max_allocation() const {
  return options_.memory_limit ? options_.memory_limit : host_memory().total;
}

bool CpuDevice::supports(const Tensor& node) const {
  if (static_cast<uint32_t>(node.op) >= kOpCount) return false;
  if (node.op == Op::none || is_view_op(node.op)) return true;
  return cpu::op_entry(node.op).kernel != nullptr;
}

StatusOr<std::unique_ptr<Buffer>> CpuDevice::allocate(uint64_t size) {
  const uint64_t rounded = (std::max<uint64_t>(size, 1) + alignment() - 1) / alignment() * alignment();
  if (rounded < size) return out_of_memory(name() + ": allocation of " + std::to_string(size) + " bytes overflows");
  if (options_.memory_limit) {
    // Reserve first, so two threads cannot both pass the check.
    const uint64_t before = allocated_.fetch_add(rounded);
    if (before + rounded > options_.memory_limit) {
      allocated_ -= rounded;
      const uint64_t free = before < options_.memory_limit ? options_.memory_limit - before : 0;
      return out_of_memory(name() + ": cannot allocate " + format_bytes(size) + "; " + format_bytes(free) + " of " +
                           format_bytes(options_.memory_limit) + " free");
    }
  } else {
    allocated_ += rounded;
  }
  cpu::HostMemory bytes = freed_->take(rounded, alignment());
  if (!bytes) {
    allocated_ -= rounded;
    return out_of_memory(name() + ": the host could not allocate " + format_bytes(size));
  }
  return std::unique_ptr<Buffer>(std::make_unique<CpuBuffer>(*this, std::move(bytes), size, rounded));
}

StatusOr<std::unique_ptr<Stream>> CpuDevice::create_stream() {
  return std::unique_ptr<Stream>(std::make_unique<CpuStream>(*this));
}

std::shared_ptr<cpu::ThreadPool> CpuDevice::shared_threads(int threads, bool pin_threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_shared<cpu::ThreadPool>(threads, pin_threads);
}

int CpuDevice::threads() const { return pool_->size(); }

void CpuDevice::set_threads(int threads) {
  std::lock_guard<std::mutex> lock(compute_mutex_);
  pool_ = shared_threads(threads, options_.pin_threads);
}

Status CpuDevice::compute(Graph& g) {
  // Every tensor a kernel touches must be in host memory.
  size_t work_size = 0;
  std::lock_guard<std::mutex> lock(compute_mutex_);
  const int nth = pool_->size();
  for (Tensor* n : g.nodes()) {
    if (!supports(*n)) return unsupported(name() + " cannot compute " + std::string(name_of(n->op)));
    const cpu::OpEntry& entry = cpu::op_entry(n->op);
    if (entry.kernel == nullptr) continue;
    if (n->data == nullptr)
      return invalid_argument("compute: " + std::string(name_of(n->op)) + " " + describe(*n) +
                              " is not placed in host memory");
    for (Tensor* s : n->src) {
      if (s && s->data == nullptr) {
        return invalid_argument("compute: source " + describe(*s) + " of " + name_of(n->op) +
                                " is not placed in host memory");
      }
    }
    if (entry.work_size) work_size = std::max(work_size, entry.work_size(*n, nth));
  }
  // Scratch starts on a cache line; kernels may rely on that for SIMD loads.
  if (work_.size() < work_size + 64) {
    try {
      work_.resize(work_size + 64);
    } catch (const std::bad_alloc&) {
      return out_of_memory("compute: the graph's " + format_bytes(work_size) + " of scratch do not fit in host memory");
    }
  }
  const auto misalign = reinterpret_cast<uintptr_t>(work_.data()) % 64;
  char* wdata = work_.data() + (misalign ? 64 - misalign : 0);

  // Small graphs (a tiny model's decode step) run on this thread alone: a
  // barrier per node costs more than the node's work, and far more when the
  // machine is busy and a worker waits for a core.
  const bool alone = nth > 1 && average_node_work(g) < options_.min_work_per_node_for_threads;
  cpu::Barrier barrier(alone ? 1 : nth);
  const std::vector<uint8_t> wait_before = alone ? std::vector<uint8_t>(g.nodes().size(), 0) : cpu::plan_barriers(g);
  // nth chunk counters per node, all zero: no reset (and no extra barrier) between nodes.
  std::vector<std::atomic<int64_t>> chunk_counters(g.nodes().size() * static_cast<size_t>(nth));
  // A kernel that throws (its scratch did not fit in memory) fails this
  // compute: its thread aborts the barrier, the others finish the node they
  // are in and stop, and the caller gets a Status. The pool lives on.
  std::mutex failure_mutex;
  std::exception_ptr failure;
  const Tensor* failed_node = nullptr;
  const auto body = [&](int ith, int n_threads) {
    cpu::ComputeParams params;
    params.ith = ith;
    params.nth = n_threads;
    params.wdata = wdata;
    params.wsize = work_size;
    params.barrier = &barrier;
    params.kernels = kernels_;
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      Tensor* n = g.nodes()[i];
      const cpu::OpEntry& entry = cpu::op_entry(n->op);
      if (entry.kernel == nullptr || n->nelements() == 0) continue;  // an empty result has nothing to write
      if (wait_before[i]) barrier.wait();
      if (barrier.aborted()) return;
      params.next_chunk = &chunk_counters[i * static_cast<size_t>(nth)];
      try {
        if (cpu::take_injected_kernel_failure(n->op)) throw std::bad_alloc();
        entry.kernel(params, *n);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (!failure) {
            failure = std::current_exception();
            failed_node = n;
          }
        }
        barrier.abort();
        return;
      }
    }
  };
  if (alone) {
    body(0, 1);
  } else {
    pool_->run(body);
  }
  return failure ? kernel_failure(failure, *failed_node) : Status();
}

}  // namespace tensorpc
