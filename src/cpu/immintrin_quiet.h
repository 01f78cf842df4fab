// <immintrin.h> for files that use AVX-512 intrinsics. GCC 12's AVX-512 headers trip
// -Wmaybe-uninitialized on their own _mm512_undefined_* helpers (GCC bug 105593); the warning
// points into the header, so it is silenced there only. Include this before anything that
// includes <immintrin.h> itself: only the first inclusion is compiled.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
