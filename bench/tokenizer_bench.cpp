// Encode speed of the tokenizers on English text: the King James text of
// tests/data/kjv-heldout.txt (15 KB) encoded 256 times, one encode() call
// each, so that nothing one call learns (BPE's per-call word cache) carries
// over to the next, on one thread, with the vocabularies of ../shared/vocab
// (GPT-2 and Qwen 2: byte-level BPE; Phi-3: SentencePiece). Prints MB/s of
// input per vocabulary, the best of three passes, both per second of wall
// clock and per second of the thread's CPU time (the figure that holds on a
// machine shared with other work); a vocabulary that is absent is skipped with
// a message. The bar for byte-level BPE is 5 MB/s.
//
// Run from the repository root: build/bench/tokenizer_bench [vocab-dir] [text]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model/gguf/gguf.h"
#include "model/text/tokenizer_gguf.h"

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
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
  constexpr int kCalls = 256;

  std::printf("%-8s %6s %10s %12s %12s\n", "vocab", "kind", "tokens", "MB/s (wall)", "MB/s (cpu)");
  for (const char* name : {"gpt-2", "qwen2", "phi-3"}) {
    const std::string path = dir + "/ggml-vocab-" + name + ".gguf";
    if (!std::filesystem::exists(path)) {
      std::printf("%-8s skipped: %s is absent\n", name, path.c_str());
      continue;
    }
    auto file = tensorpc::GgufFile::open(path);
    if (!file.ok()) {
      std::fprintf(stderr, "%s\n", file.status().to_string().c_str());
      return 1;
    }
    auto tok = tensorpc::tokenizer_from_gguf(*file.value());
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
      return 1;
    }
    double best_wall = 1e30, best_cpu = 1e30;
    size_t n_tokens = 0;
    for (int pass = 0; pass < 3; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = thread_cpu_seconds();
      n_tokens = 0;
      for (int call = 0; call < kCalls; ++call) n_tokens += tok.value().encode(passage, /*add_special=*/false).size();
      best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
      best_wall = std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    const double mb = static_cast<double>(passage.size()) * kCalls / 1e6;
    const bool bpe = tok.value().kind() == tensorpc::VocabularyKind::bpe;
    std::printf("%-8s %6s %10zu %12.1f %12.1f\n", name, bpe ? "bpe" : "spm", n_tokens, mb / best_wall, mb / best_cpu);
  }
  return 0;
}
