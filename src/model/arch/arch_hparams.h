// Reading a model's hyper-parameters from its GGUF keys, under its
// architecture's prefix ("qwen2.embedding_length", …).
//
// Every key under the prefix is either read, or known to leave the forward
// pass alone (vocab_size, rope.scaling.finetuned), or the file is refused
// with an error naming the key: a key tensorpc does not know may change the
// math (a RoPE scaling it lacks, mixture of experts, ALiBi), and generating
// from such a file as if it were absent would give wrong text, not an error.
#pragma once

#include "model/arch/arch.h"
#include "model/arch/llama.h"
#include "model/gguf/gguf.h"

namespace tensorpc {

// Fills everything of `hp` but n_vocab (the embedding's rows: the loader
// reads it from the tensor) and checks nothing the tensors decide.
Status read_arch_hparams(const GgufFile& file, const ArchDescription& arch, LlamaHparams& hp);

}  // namespace tensorpc
