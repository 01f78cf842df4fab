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

const KernelTable& best_kernels() {
  static const KernelTable& table = select_kernels();  // decided once; thread-safe init
  return table;
}

}  // namespace tensorpc::cpu
