// Reading a Tokenizer from a GGUF file's tokenizer.ggml.* keys.
//
// tokenizer.ggml.model names the kind: "llama" (SentencePiece; also when the
// key is absent) or "gpt2" (byte-level BPE, which needs tokenizer.ggml.merges
// and reads tokenizer.ggml.pre, "default" when absent). Any other model, and
// a pre value tensorpc does not know, is refused with an error naming it.
// Absent special ids: SentencePiece bos 1, eos 2, unk 0; BPE none. Absent
// add_bos_token: true for SentencePiece and for Llama 3's pre-tokenizer,
// false for other BPE vocabularies (GPT-2 and Qwen 2 do not add one).
#pragma once

#include "model/gguf/gguf.h"
#include "model/text/tokenizer.h"

namespace tensorpc {

StatusOr<Tokenizer> tokenizer_from_gguf(const GgufFile& file);

}  // namespace tensorpc
