// libFuzzer target: arbitrary bytes as a llama model file, as `tensorpc run`
// and `tensorpc demo` meet one. Opening must never crash: a file is refused
// with a Status, or every part the forward pass and the tokenizer use is
// consistent. When it opens, the tokenizer encodes and decodes varied text
// into ids inside the vocabulary, every token has a piece, and the graph of a
// prefill and of a decode step builds over the model's weights (the builders
// throw on shapes that do not fit, which open() must have refused). With all
// 256 byte tokens, decode(encode(text)) must give the text back.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/arch/llama.h"
#include "model/arch/llama_model.h"
#include "tensorpc/context.h"
#include "tensorpc/graph.h"

namespace {

using namespace tensorpc;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "model_fuzz: %s\n", what);
  std::abort();
}

// Spaces, punctuation, multi-byte UTF-8, bytes that are not UTF-8, a control
// token's usual spelling, and a long run.
const char* const kTexts[] = {
    "",
    "In the beginning God created the heaven and the earth.",
    "  two  spaces,\ttabs\tand\nnew lines\n\n",
    "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93 \xf0\x9d\x84\x9e",
    "\xff\xfe\x80 broken \xc3",
    "<s></s><unk> <0x41> 0123456789 !?.,;:'\"()[]{}",
};

void check_tokenizer(const Tokenizer& tok, std::string_view extra) {
  const int32_t n = tok.n_tokens();
  std::vector<std::string_view> texts(std::begin(kTexts), std::end(kTexts));
  texts.push_back(extra);
  const std::string long_run(300, 'a');
  texts.push_back(long_run);
  for (std::string_view text : texts) {
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, /*add_special=*/special, /*parse_special=*/special);
      for (int32_t id : ids) {
        if (id < 0 || id >= n) fail("encode() gave an id outside the vocabulary");
      }
      (void)tok.decode(ids, /*special=*/true);
      const std::string back = tok.decode(ids);
      // The documented round trip: all 256 byte tokens, no "▁" in the text,
      // no specials added or parsed.
      if (!special && tok.missing_bytes().empty() && text.find("\xe2\x96\x81") == std::string_view::npos &&
          back != text) {
        fail("decode(encode(text)) is not the text, with every byte token in the vocabulary");
      }
    }
  }
  for (int32_t id = 0; id < n && id < 4096; ++id) {
    (void)tok.token_to_piece(id);
    (void)tok.token_to_piece(id, /*special=*/true);
    (void)tok.is_end_of_generation(id);
  }
  if (tok.eot() < -1 || tok.eot() >= n) fail("eot() is outside the vocabulary");
}

void check_graphs(const LlamaModel& model) {
  const LlamaHparams& hp = model.hparams();
  // A small cache: graph building needs descriptors only, no memory.
  Context ctx;
  KvCache cache;
  cache.n_ctx = 64;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    cache.k.push_back(ctx.new_tensor(DType::f32, {hp.kv_dim(), cache.n_ctx}));
    cache.v.push_back(ctx.new_tensor(DType::f32, {cache.n_ctx, hp.kv_dim()}));
  }
  for (const auto& [n_tokens, n_kv] : {std::pair<int64_t, int64_t>{4, 32}, {1, 64}}) {
    Context step_ctx;
    const LlamaStep step =
        build_llama_step(step_ctx, hp, model.weights(), cache, n_tokens, n_kv, /*all_logits=*/n_tokens > 1);
    if (step.logits == nullptr || step.logits->ne[0] != hp.n_vocab) fail("a step's logits are not [n_vocab, …]");
    (void)Graph::build({step.logits});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto model = LlamaModel::open_memory(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!model.ok()) {
    if (model.status().message().empty()) fail("a refused file without a reason");
    return 0;
  }
  const LlamaModel& m = *model.value();
  // The file's last bytes as one more text: whatever the mutator put there.
  const size_t tail = size < 64 ? size : 64;
  check_tokenizer(m.tokenizer(), std::string_view(reinterpret_cast<const char*>(data + size - tail), tail));
  check_graphs(m);
  return 0;
}
