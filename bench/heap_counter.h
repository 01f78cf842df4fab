// What a program holds on the heap through operator new. A program that
// links heap_counter.cpp has its global operator new and delete replaced by
// ones that keep the bytes in use and the most in use since the last reset, so
// that a benchmark or a test can say what one call allocated at its worst.
// Only a program of its own may link it, as it counts the whole process (but
// not what C libraries allocate with malloc, PCRE2's matching among them).
#pragma once

#include <cstddef>

namespace tensorpc::bench {

// Makes the peak the bytes in use now, and returns them: heap_peak() less
// this is the most what follows allocates at once.
size_t reset_heap_peak();
size_t heap_peak();

}  // namespace tensorpc::bench
