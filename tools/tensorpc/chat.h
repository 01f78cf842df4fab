// `tensorpc chat -m MODEL [--rpc …] [-sys PROMPT]`: a conversation with a
// model in the terminal, on the local CPU and the devices of any servers
// given with --rpc, placed as `tensorpc run` places them.
//
// Each line typed is a message; the reply streams as it is generated and the
// KV cache is kept across turns (model/runtime/chat_session.h), so a turn costs only
// its own tokens. `/exit` or end of input (Ctrl-D) ends the conversation;
// Ctrl-C stops the reply being generated (at the prompt, it ends the
// conversation). When the context is full the oldest turns are dropped, with
// a notice. The conversation is rendered with the model's chat template, or
// the one --chat-template names.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

#include "model/arch/llama_model.h"
#include "model/text/chat_template.h"
#include "model_setup.h"
#include "sampling_flags.h"
#include "tensorpc/model.h"

namespace CLI {
class App;
}

namespace tensorpc::tools {

struct ChatCommandOptions {
  ModelSetup setup;           // the model and where it runs
  std::string system_prompt;  // -sys
  std::string chat_template;  // --chat-template NAME; empty: the model's
  int64_t n_predict = 0;      // tokens of a reply at most; 0: until the turn ends
  SamplingOptions sampler;    // the library's defaults are the command line's
  LookupFlags lookup;         // --lookup, --draft-max
  bool verbose = false;       // a line per turn: tokens evaluated and generated, speeds
};

// Runs the conversation: messages from `in`, one per line; replies to
// `out`; the placement, notices and errors to `err`. `cancel` (may be null)
// stops the reply being generated when set; the command clears it for the
// next turn. Returns the exit code: 0, or 1 when the model cannot be placed
// or a turn fails.
int chat_command(const ChatCommandOptions& options, std::FILE* in, std::FILE* out, std::FILE* err,
                 std::atomic<bool>* cancel = nullptr);

// The template a model's conversations are rendered with: the one `name`
// names (--chat-template), else the one the model's tokenizer.chat_template
// is. An error says how to choose one when neither works.
StatusOr<ChatTemplate> choose_template(const LlamaModel& model, const std::string& name);

// Adds the `chat` subcommand; when it runs, its exit code goes to *exit_code.
void add_chat_command(CLI::App& app, int* exit_code);

}  // namespace tensorpc::tools
