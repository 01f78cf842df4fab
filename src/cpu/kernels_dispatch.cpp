// Chooses the kernel table for the running CPU once, honouring TENSORPC_KERNELS.
#include <cstdlib>
#include <cstring>

#include "cpu/kernels.h"

namespace tensorpc::cpu {
namespace {

const KernelTable& select_kernels() {
  const KernelTable* best = avx512_kernels();
  if (best == nullptr) best = avx2_kernels();
  if (best == nullptr) best = &portable_kernels();

  const char* forced = std::getenv("TENSORPC_KERNELS");
  if (forced == nullptr || *forced == '\0') return *best;
  if (std::strcmp(forced, "portable") == 0) return portable_kernels();
  if (std::strcmp(forced, "avx2") == 0 && avx2_kernels() != nullptr) return *avx2_kernels();
  return *best;  // "avx512", unknown names, or a table this CPU lacks
}

}  // namespace

GemmFn gemm_for(const KernelTable& k, DType type) {
  switch (type) {
    case DType::f32: return k.gemm_f32;
    case DType::f16: return k.gemm_f16;
    case DType::bf16: return k.gemm_bf16;
    case DType::q8_0: return k.gemm_q8_0;
    case DType::q4_0: return k.gemm_q4_0;
    case DType::q4_1: return k.gemm_q4_1;
    case DType::q5_0: return k.gemm_q5_0;
    case DType::q5_1: return k.gemm_q5_1;
    case DType::iq4_nl: return k.gemm_iq4_nl;
    case DType::q2_K: return k.gemm_q2_K;
    case DType::q3_K: return k.gemm_q3_K;
    case DType::q4_K: return k.gemm_q4_K;
    case DType::q5_K: return k.gemm_q5_K;
    case DType::q6_K: return k.gemm_q6_K;
    case DType::iq4_xs: return k.gemm_iq4_xs;
    case DType::mxfp4: return k.gemm_mxfp4;
    case DType::q8_K:
    case DType::i32: return nullptr;
  }
  return nullptr;
}

DType vec_dot_type(DType weights) {
  switch (weights) {
    case DType::q8_0:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::iq4_nl:
    case DType::mxfp4: return DType::q8_0;
    case DType::q2_K:
    case DType::q3_K:
    case DType::q4_K:
    case DType::q5_K:
    case DType::q6_K:
    case DType::iq4_xs: return DType::q8_K;
    default: return DType::f32;
  }
}

void quantize_activations(const KernelTable& k, DType type, const float* x, void* y, int64_t n) {
  if (type == DType::q8_K) {
    k.quantize_row_q8_K(x, y, n);
  } else {
    k.quantize_row_q8_0(x, y, n);
  }
}

const KernelTable& best_kernels() {
  static const KernelTable& table = select_kernels();  // decided once; thread-safe init
  return table;
}

}  // namespace tensorpc::cpu
