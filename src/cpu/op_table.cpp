// The CPU dispatch table: Op number -> kernel and scratch-size function.
//
// Built at compile time by naming each op, so the table cannot drift out of
// order if an op is appended to op.h; ops not named here (none and the view
// ops) keep a null kernel because they compute nothing.
#include <array>
#include <atomic>
#include <cstdint>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

constexpr std::array<OpEntry, kOpCount> make_table() {
  std::array<OpEntry, kOpCount> t{};
  auto set = [&t](Op op, OpKernel kernel, WorkSizeFn work_size = nullptr, ScratchFn scratch = nullptr) {
    t[static_cast<uint32_t>(op)] = OpEntry{kernel, work_size, scratch};
  };
  set(Op::add, op_add);
  set(Op::sub, op_sub);
  set(Op::mul, op_mul);
  set(Op::div, op_div);
  set(Op::scale, op_scale);
  set(Op::mul_mat, op_mul_mat, mul_mat_work_size, mul_mat_scratch);
  set(Op::get_rows, op_get_rows);
  set(Op::cpy, op_cpy);
  set(Op::rms_norm, op_rms_norm);
  set(Op::norm, op_norm);
  set(Op::rope, op_rope);
  set(Op::soft_max, op_soft_max);
  set(Op::silu, op_silu);
  set(Op::gelu, op_gelu);
  set(Op::tanh, op_tanh);
  set(Op::sigmoid, op_sigmoid);
  set(Op::swiglu, op_swiglu);
  set(Op::diag_mask_inf, op_diag_mask_inf);
  set(Op::concat, op_concat);
  set(Op::argmax, op_argmax);
  set(Op::top_k, op_top_k);
  set(Op::sample, op_sample);
  set(Op::set_rows, op_set_rows);
  set(Op::mul_mat_id, op_mul_mat_id, mul_mat_id_work_size, mul_mat_id_scratch);
  set(Op::top_k_ids, op_top_k_ids);
  set(Op::swiglu_clamp, op_swiglu_clamp);
  return t;
}

constexpr std::array<OpEntry, kOpCount> kTable = make_table();
constexpr OpEntry kNoKernel{};

std::atomic<int> injected_failures{0};
std::atomic<uint32_t> injected_failure_op{0};

}  // namespace

const OpEntry& op_entry(Op op) {
  // An op number from the wire may be anything; outside the table it is an
  // op with no kernel, for the caller to reject.
  const auto i = static_cast<uint32_t>(op);
  return i < kTable.size() ? kTable[i] : kNoKernel;
}

void inject_kernel_failures(Op op, int count) {
  injected_failure_op.store(static_cast<uint32_t>(op), std::memory_order_relaxed);
  injected_failures.store(count, std::memory_order_release);
}

bool take_injected_kernel_failure(Op op) {
  int left = injected_failures.load(std::memory_order_acquire);  // 0 but in tests
  if (left <= 0 || injected_failure_op.load(std::memory_order_relaxed) != static_cast<uint32_t>(op)) return false;
  while (left > 0 && !injected_failures.compare_exchange_weak(left, left - 1, std::memory_order_acq_rel)) {
  }
  return left > 0;
}

}  // namespace tensorpc::cpu
