// Filling in and handing out a KernelTable (kernels.h): the entries of a format family set from
// the one template a table's file instantiates per format, and the table built once and returned
// only where the running CPU supports it.
//
// Free of intrinsics, and everything has internal linkage as in aligned.h: each table's file
// keeps its own copy, built for its own instruction set.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <type_traits>

#include "cpu/kernels.h"

namespace tensorpc::cpu {
namespace {

// gemm_of(std::type_identity<F>{}) returns the GemmFn of a file's format type F; the format types
// name the family's formats in KernelTable order.

// q4_1, q5_0, q5_1, iq4_nl, mxfp4: the 32-value block formats after q4_0, against q8_0 activations.
template <typename Q4_1, typename Q5_0, typename Q5_1, typename IQ4_NL, typename MXFP4, typename GemmOf>
inline void set_blocks32_gemms(KernelTable& t, GemmOf gemm_of) {
  t.gemm_q4_1 = gemm_of(std::type_identity<Q4_1>{});
  t.gemm_q5_0 = gemm_of(std::type_identity<Q5_0>{});
  t.gemm_q5_1 = gemm_of(std::type_identity<Q5_1>{});
  t.gemm_iq4_nl = gemm_of(std::type_identity<IQ4_NL>{});
  t.gemm_mxfp4 = gemm_of(std::type_identity<MXFP4>{});
}

// q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs: the super-block formats, against q8_K activations.
template <typename Q2_K, typename Q3_K, typename Q4_K, typename Q5_K, typename Q6_K, typename IQ4_XS, typename GemmOf>
inline void set_superblock_gemms(KernelTable& t, GemmOf gemm_of) {
  t.gemm_q2_K = gemm_of(std::type_identity<Q2_K>{});
  t.gemm_q3_K = gemm_of(std::type_identity<Q3_K>{});
  t.gemm_q4_K = gemm_of(std::type_identity<Q4_K>{});
  t.gemm_q5_K = gemm_of(std::type_identity<Q5_K>{});
  t.gemm_q6_K = gemm_of(std::type_identity<Q6_K>{});
  t.gemm_iq4_xs = gemm_of(std::type_identity<IQ4_XS>{});
}

// The table build() returns, built on the first call, or null where supported() (asked once) says
// the running CPU lacks the instruction set; build() then never runs, since code compiled for the
// set may use its instructions even to fill a struct. build is a lambda, so each table has its
// own statics.
template <typename Build>
inline const KernelTable* table_if_supported(Build build, bool (*supported)()) {
  static const bool ok = supported();
  if (!ok) return nullptr;
  static const KernelTable table = build();
  return &table;
}

#if defined(__x86_64__) || defined(__i386__)
// Whether the running CPU has F16C, which __builtin_cpu_supports does not know.
inline bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}
#endif

}  // namespace
}  // namespace tensorpc::cpu
