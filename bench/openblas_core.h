// Makes OpenBLAS use its best kernels for this CPU, so that it is a fair
// baseline.
//
// OpenBLAS picks its kernels when the library loads, from the CPU model; on
// CPUs it does not know (many virtual machines) it falls back to SSE3 code
// several times slower than it can be. OPENBLAS_CORETYPE overrides the pick,
// but only if set before the library loads — so when it is unset we set it
// from the CPU's features and re-execute the benchmark.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

inline void ensure_openblas_coretype(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* core = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    core = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    core = "Haswell";
  }
  if (core == nullptr) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "note: could not re-execute with OPENBLAS_CORETYPE=%s; OpenBLAS keeps its own pick\n", core);
}
