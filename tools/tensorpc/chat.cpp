// `tensorpc chat` (chat.h): flags, then a tensorpc::Model opened
// (model_setup.h) and a ChatSession on its generator fed line by line.
#include "tensorpc/chat.h"

#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <memory>
#include <string>

#include "api/model_internals.h"
#include "cli_checks.h"
#include "model/runtime/chat_session.h"
#include "sampling_flags.h"
#include "signal_watch.h"

namespace tensorpc::tools {
namespace {

// Lines from a file descriptor, read without blocking past a Ctrl-C: the
// reader waits in poll() for at most 100 ms at a time and checks the flag
// (SignalWatch sets it from its own thread).
class LineReader {
 public:
  LineReader(int fd, const std::atomic<bool>* cancel) : fd_(fd), cancel_(cancel) {}

  enum class Result { line, end, interrupted };

  Result next(std::string& line) {
    while (true) {
      if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
        line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return Result::line;
      }
      if (eof_) {
        if (buffered_.empty()) return Result::end;
        line = std::move(buffered_);  // a last line without a newline still counts
        buffered_.clear();
        return Result::line;
      }
      if (cancel_ != nullptr && cancel_->load()) return Result::interrupted;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;  // a timeout: check the flag again
      char chunk[4096];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof_ = true;
        continue;
      }
      buffered_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  const std::atomic<bool>* cancel_;
  std::string buffered_;
  bool eof_ = false;
};

const char* stop_notice(ChatStop stop) {
  switch (stop) {
    case ChatStop::cancelled: return "[reply stopped]";
    case ChatStop::context_full:
      return "[the context is full: the reply stopped there; the next message drops the oldest turns]";
    case ChatStop::n_predict: return "[the reply reached -n tokens]";
    case ChatStop::end_of_turn: break;
  }
  return nullptr;
}

}  // namespace

StatusOr<ChatTemplate> choose_template(const LlamaModel& model, const std::string& name) {
  const Tokenizer& tok = model.tokenizer();
  const std::string bos = tok.bos() >= 0 ? std::string(tok.text(tok.bos())) : std::string();
  const std::string eos = tok.eos() >= 0 ? std::string(tok.text(tok.eos())) : std::string();
  if (!name.empty()) return ChatTemplate::named(name, bos, eos);
  TENSORPC_ASSIGN_OR_RETURN(const std::string text, model.file().get_string("tokenizer.chat_template", ""));
  return ChatTemplate::detect(text, bos, eos);
}

int chat_command(const ChatCommandOptions& o, std::FILE* in, std::FILE* out, std::FILE* err,
                 std::atomic<bool>* cancel) {
  if (const Status s = o.sampler.validate(); !s.ok()) {
    std::fprintf(err, "tensorpc chat: %s\n", s.to_string().c_str());
    return 1;
  }
  auto opened = LlamaModel::open(o.setup.model);
  if (!opened.ok()) {
    std::fprintf(err, "tensorpc chat: %s\n", opened.status().message().c_str());
    return 1;
  }
  // Checked before the weights go anywhere: a model without a usable template costs no upload.
  auto chat_template = choose_template(*opened.value(), o.chat_template);
  if (!chat_template.ok()) {
    std::fprintf(err, "tensorpc chat: %s\n", chat_template.status().message().c_str());
    return 1;
  }
  auto model = open_model(std::move(opened).value(), o.setup, err);
  if (!model.ok()) {
    std::fprintf(err, "tensorpc chat: %s\n", model.status().message().c_str());
    return 1;
  }
  ChatSessionOptions options;
  options.sampler = sampler_options(o.sampler);
  options.n_predict = o.n_predict;
  options.lookup = o.lookup.lookup;
  options.draft_max = o.lookup.draft_max;
  if (Model* draft = ModelInternals::draft(model.value())) options.draft_model = &ModelInternals::generator(*draft);
  options.system_prompt = o.system_prompt;
  auto session =
      ChatSession::create(ModelInternals::generator(model.value()), std::move(chat_template).value(), options);
  if (!session.ok()) {
    std::fprintf(err, "tensorpc chat: %s\n", session.status().message().c_str());
    return 1;
  }
  std::fprintf(err, "chat template %s, context %lld; /exit or Ctrl-D ends, Ctrl-C stops a reply\n",
               std::string(session.value().chat_template().name()).c_str(),
               static_cast<long long>(model.value().info().context_size));

  const bool terminal = ::isatty(::fileno(in)) != 0;
  LineReader reader(::fileno(in), cancel);
  std::string line;
  int64_t turns = 0, evaluated = 0, generated = 0;
  while (true) {
    if (terminal) std::fprintf(out, "> ");
    std::fflush(out);
    if (reader.next(line) != LineReader::Result::line) {  // end of input, or Ctrl-C at the prompt
      std::fprintf(out, "\n");
      break;
    }
    if (line == "/exit") break;
    if (line.empty()) continue;
    if (cancel != nullptr) cancel->store(false);
    auto turn = session.value().reply(
        line,
        [out](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), out);
          std::fflush(out);
        },
        cancel);
    if (cancel != nullptr) cancel->store(false);  // a Ctrl-C stops this reply, not the conversation
    std::fprintf(out, "\n");
    std::fflush(out);
    if (!turn.ok()) {
      std::fprintf(err, "tensorpc chat: %s\n", turn.status().to_string().c_str());
      if (turn.status().code() == StatusCode::out_of_memory) continue;  // a message too long: say so, go on
      return 1;
    }
    const ChatTurn& t = turn.value();
    if (t.dropped_messages > 0) {
      std::fprintf(err, "[the context was full: the %lld oldest messages were dropped]\n",
                   static_cast<long long>(t.dropped_messages));
    }
    if (const char* notice = stop_notice(t.stop)) std::fprintf(err, "%s\n", notice);
    if (o.verbose) {
      std::fprintf(err, "[%lld tokens evaluated in %.3f s, %lld generated in %.3f s (%.1f tokens/s)]\n",
                   static_cast<long long>(t.evaluated), t.prompt_seconds, static_cast<long long>(t.generated),
                   t.reply_seconds, t.reply_seconds > 0 ? static_cast<double>(t.generated) / t.reply_seconds : 0.0);
      if (t.speculation.steps > 0) {
        std::fprintf(err, "[lookup: %lld of %lld drafted tokens accepted in %lld steps]\n",
                     static_cast<long long>(t.speculation.accepted), static_cast<long long>(t.speculation.drafted),
                     static_cast<long long>(t.speculation.steps));
      }
    }
    ++turns;
    evaluated += t.evaluated;
    generated += t.generated;
  }
  std::fprintf(err, "%lld turns: %lld tokens evaluated, %lld generated\n", static_cast<long long>(turns),
               static_cast<long long>(evaluated), static_cast<long long>(generated));
  return 0;
}

void add_chat_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("chat", "talk with a model in the terminal, on local and remote devices");
  auto o = std::make_shared<ChatCommandOptions>();
  cmd->add_option("-m,--model", o->setup.model, "the model, a GGUF file with a chat template")->required();
  cmd->add_option("--system-prompt", o->system_prompt, "the system prompt (also -sys)");
  cmd->add_option(
      "--chat-template", o->chat_template,
      "render the conversation as this family does instead of by the model's template: " + [] {
        std::string names;
        for (std::string_view n : ChatTemplate::names()) names += (names.empty() ? "" : ", ") + std::string(n);
        return names;
      }());
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens of a reply at most (0: until the turn ends)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", o->setup.n_ctx, "context length (0: the model's, at most 2048)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  add_sampling_flags(*cmd, &o->sampler);
  add_lookup_flags(*cmd, &o->lookup, &o->setup);
  cmd->add_flag("--verbose", o->verbose, "after each reply, the tokens evaluated and generated and their speed");
  auto where = ModelSetupFlags::add_to(*cmd);
  cmd->callback([o, where, exit_code] {
    ChatCommandOptions options = *o;
    where->apply(options.setup);
    // Ctrl-C interrupts a read or a reply instead of ending the process.
    std::atomic<bool> interrupted{false};
    SignalWatch watch({SIGINT}, &interrupted);  // before the devices start their threads
    *exit_code = chat_command(options, stdin, stdout, stderr, &interrupted);
  });
}

}  // namespace tensorpc::tools
