// Encode speed and memory of the tokenizers on English text, on one thread,
// with the vocabularies of ../shared/vocab (GPT-2 and Qwen 2: byte-level BPE;
// Phi-3: SentencePiece) and of the bundled models (kjv-bpe: byte-level BPE;
// kjv-tiny: SentencePiece); a vocabulary that is absent is skipped with a
// message.
//
// Speed: the King James text of tests/data/kjv-heldout.txt (15 KB) encoded 256
// times, one encode() call each, so that nothing one call learns (BPE's
// per-call word cache) carries over to the next. Prints MB/s of input per
// vocabulary, the best of three passes, both per second of wall clock and per
// second of the thread's CPU time (the figure that holds on a machine shared
// with other work). The bar for byte-level BPE is 5 MB/s.
//
// Memory: the same text repeated to 4 MiB, as a long prompt, encoded once.
// Every operator new of the process is counted (heap_counter.h), so the
// growth of the heap's peak over that one call is what the call allocated at
// its worst: the returned token vector (its capacity) and the encoder's
// working set, printed apart and as multiples of the prompt's bytes. PCRE2
// allocates with malloc, outside that count; the growth of the process's peak
// resident memory over the call (VmHWM after "5" is written to
// /proc/self/clear_refs; "-" where the kernel does not allow it) sees
// everything, pages the heap already held excepted.
// tokenizer_memory_tests asserts the working set's bound on a 1 MiB prompt.
//
// Run from the repository root: build/bench/tokenizer_bench [vocab-dir] [text]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "heap_counter.h"
#include "model/gguf/gguf.h"
#include "model/text/tokenizer_gguf.h"

namespace {

// The kB of /proc/self/status line `key` ("VmRSS:"), or -1.
long status_kb(const char* key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(key)) return std::atol(line.c_str() + std::strlen(key));
  }
  return -1;
}

// Resets the peak resident memory (VmHWM) to the current one; false where the kernel does not allow it.
bool reset_resident_peak() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct NamedVocabulary {
  std::string name, path;
};

// The tokenizer of the GGUF file at `path`; exits on an error.
tensorpc::Tokenizer open_tokenizer(const std::string& path) {
  auto file = tensorpc::GgufFile::open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.status().to_string().c_str());
    std::exit(1);
  }
  auto tok = tensorpc::tokenizer_from_gguf(*file.value());
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(tok).value();
}

void measure_speed(const tensorpc::Tokenizer& tok, const std::string& name, const std::string& passage) {
  constexpr int kCalls = 256;
  double best_wall = 1e30, best_cpu = 1e30;
  size_t n_tokens = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    n_tokens = 0;
    for (int call = 0; call < kCalls; ++call) n_tokens += tok.encode(passage, /*add_special=*/false).size();
    best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
    best_wall = std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double mb = static_cast<double>(passage.size()) * kCalls / 1e6;
  const bool bpe = tok.kind() == tensorpc::VocabularyKind::bpe;
  std::printf("%-8s %6s %10zu %12.1f %12.1f\n", name.c_str(), bpe ? "bpe" : "spm", n_tokens, mb / best_wall,
              mb / best_cpu);
}

void measure_memory(const tensorpc::Tokenizer& tok, const std::string& name, const std::string& prompt) {
  const bool resident = reset_resident_peak();
  const long resident_before = status_kb("VmRSS:");
  const size_t before = tensorpc::bench::reset_heap_peak();
  const std::vector<int32_t> ids = tok.encode(prompt, /*add_special=*/false);
  const size_t growth = tensorpc::bench::heap_peak() - before;
  const std::string resident_growth =
      resident ? std::to_string((status_kb("VmHWM:") - resident_before) * 1024) : std::string("-");
  const size_t vector_bytes = ids.capacity() * sizeof(int32_t);
  const size_t working = growth > vector_bytes ? growth - vector_bytes : 0;
  const auto times_prompt = [&](size_t bytes) {
    return static_cast<double>(bytes) / static_cast<double>(prompt.size());
  };
  std::printf("%-8s %10zu %10zu %14zu %14zu %14zu %8.2f %14s\n", name.c_str(), prompt.size(), ids.size(), growth,
              vector_bytes, working, times_prompt(working), resident_growth.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "../shared/vocab";
  const std::string text_path = argc > 2 ? argv[2] : "tests/data/kjv-heldout.txt";
  std::ifstream in(text_path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tokenizer_bench: cannot read %s (run from the repository root)\n", text_path.c_str());
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string passage = buffer.str();
  std::string prompt;
  while (prompt.size() < (size_t{4} << 20)) prompt += passage;

  std::vector<NamedVocabulary> vocabularies;
  for (const char* name : {"gpt-2", "qwen2", "phi-3"})
    vocabularies.push_back({name, dir + "/ggml-vocab-" + name + ".gguf"});
  for (const char* name : {"kjv-bpe", "kjv-tiny"})
    vocabularies.push_back({name, std::string("models/") + name + ".gguf"});
  std::vector<std::pair<std::string, tensorpc::Tokenizer>> tokenizers;
  for (const NamedVocabulary& v : vocabularies) {
    if (std::filesystem::exists(v.path)) {
      tokenizers.emplace_back(v.name, open_tokenizer(v.path));
    } else {
      std::printf("%-8s skipped: %s is absent\n", v.name.c_str(), v.path.c_str());
    }
  }

  std::printf("%-8s %6s %10s %12s %12s\n", "vocab", "kind", "tokens", "MB/s (wall)", "MB/s (cpu)");
  for (const auto& [name, tok] : tokenizers) measure_speed(tok, name, passage);
  std::printf("\none encode of a %zu-byte prompt: peak heap growth in bytes\n", prompt.size());
  std::printf("%-8s %10s %10s %14s %14s %14s %8s %14s\n", "vocab", "prompt", "tokens", "peak growth", "token vector",
              "working set", "x prompt", "resident");
  for (const auto& [name, tok] : tokenizers) measure_memory(tok, name, prompt);
  return 0;
}
