// `tensorpc demo` (demo.h). The servers are ServerProcess objects, so every
// way out of demo_command — success, mismatch or error — stops and reaps
// them. Each model runs through tensorpc::Model, as `tensorpc run` does, and
// is destroyed before the servers go (its buffers hold the connections).
#include "tensorpc/demo.h"

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "api/model_internals.h"
#include "cli_checks.h"
#include "model/runtime/chat_session.h"
#include "model_setup.h"
#include "server_process.h"
#include "tensorpc/chat.h"
#include "tensorpc/run.h"

#ifndef TENSORPC_BUNDLED_MODEL
#define TENSORPC_BUNDLED_MODEL "models/kjv-tiny.gguf"
#endif

namespace tensorpc::tools {

std::string bundled_model_path() { return TENSORPC_BUNDLED_MODEL; }

namespace {

// A file beside the bundled kjv-tiny model.
std::string bundled_file(const std::string& name) {
  const std::string tiny = bundled_model_path();
  const size_t slash = tiny.find_last_of('/');
  return (slash == std::string::npos ? std::string() : tiny.substr(0, slash + 1)) + name;
}

}  // namespace

std::string bundled_chat_model_path() { return bundled_file("kjv-bpe.gguf"); }

std::string bundled_draft_model_path() { return bundled_file("kjv-bpe-draft.gguf"); }

namespace {

// Each demo server's devices: `--device cpu:1` this many times.
constexpr int kDevicesPerServer = 2;

// Where the demo runs a model: every device of its servers, in equal shares,
// or the local CPU alone (no servers). The demo's own servers have no key: a
// TENSORPC_KEY_FILE meant for other servers must not make the client offer one.
ModelOptions where(const std::vector<std::string>& endpoints, int64_t context_size) {
  ModelOptions o;
  o.servers = endpoints;
  o.remote = RemoteOptions{.key = ""};
  o.use_local_cpu = endpoints.empty();
  if (!endpoints.empty()) o.split.assign(endpoints.size() * kDevicesPerServer, 1.0);
  o.context_size = context_size;
  return o;
}

// Two turns with the chat model at `path` (greedy), the replies streamed to
// `out`; with options.draft_path, speculating with that draft model.
StatusOr<std::vector<std::string>> converse(const std::string& path, const ModelOptions& options, std::FILE* out) {
  TENSORPC_ASSIGN_OR_RETURN(auto file, LlamaModel::open(path));
  TENSORPC_ASSIGN_OR_RETURN(ChatTemplate chat_template, choose_template(*file, /*name=*/""));
  TENSORPC_ASSIGN_OR_RETURN(Model model, ModelInternals::open(std::move(file), options));
  ChatSessionOptions chat;
  chat.sampler.temperature = 0;
  chat.n_predict = 48;
  chat.system_prompt = "Answer with a verse.";
  if (Model* draft = ModelInternals::draft(model)) chat.draft_model = &ModelInternals::generator(*draft);
  TENSORPC_ASSIGN_OR_RETURN(ChatSession session,
                            ChatSession::create(ModelInternals::generator(model), std::move(chat_template), chat));
  std::vector<std::string> replies;
  for (const char* message : {"In the beginning God created the heaven and the earth.", "And there was light."}) {
    std::fprintf(out, "> %s\n", message);
    auto turn = session.reply(message, [out](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), out);
      std::fflush(out);
    });
    std::fprintf(out, "\n");
    if (!turn.ok()) return turn.status();
    std::fprintf(out, "  [%lld tokens evaluated, %lld generated", static_cast<long long>(turn.value().evaluated),
                 static_cast<long long>(turn.value().generated));
    const SpeculationCounts& s = turn.value().speculation;
    if (s.steps > 0) {
      std::fprintf(out, "; the draft model's guesses: %lld of %lld right, in %lld steps",
                   static_cast<long long>(s.accepted), static_cast<long long>(s.drafted),
                   static_cast<long long>(s.steps));
    }
    std::fprintf(out, "]\n");
    replies.push_back(turn.value().text);
  }
  return replies;
}

// The chat model across the servers, then locally: 0 when the replies are the same.
int chat_demo(const std::vector<std::string>& endpoints, std::FILE* out, std::FILE* err) {
  const std::string path = bundled_chat_model_path();
  std::fprintf(out, "\na chat with %s (byte-level BPE vocabulary, Llama 3 chat template) over the same %zu devices:\n",
               path.c_str(), endpoints.size() * kDevicesPerServer);
  auto remote = converse(path, where(endpoints, 256), out);
  if (!remote.ok()) {
    std::fprintf(err, "tensorpc demo: distributed chat: %s\n", remote.status().to_string().c_str());
    return 1;
  }
  std::fprintf(out, "\nthe same chat on the local CPU alone:\n");
  auto local = converse(path, where({}, 256), out);
  if (!local.ok()) {
    std::fprintf(err, "tensorpc demo: local chat: %s\n", local.status().to_string().c_str());
    return 1;
  }
  if (local.value() != remote.value()) {
    std::fprintf(out, "\nMISMATCH: the chat replies across the servers differ from the local ones.\n");
    return 1;
  }
  std::fprintf(out,
               "\nthe chat replies across 2 servers x 2 devices equal the local CPU's, the second turn "
               "evaluating only its own tokens.\n");
  const std::string draft = bundled_draft_model_path();
  struct stat st {};
  if (::stat(draft.c_str(), &st) != 0) return 0;
  std::fprintf(out, "\nthe same chat over the servers, %s drafting on the local CPU (speculative decoding):\n",
               draft.c_str());
  ModelOptions drafted = where(endpoints, 256);
  drafted.draft_path = draft;
  auto fast = converse(path, drafted, out);
  if (!fast.ok()) {
    std::fprintf(err, "tensorpc demo: chat with a draft model: %s\n", fast.status().to_string().c_str());
    return 1;
  }
  if (fast.value() != remote.value()) {
    std::fprintf(out, "\nMISMATCH: the chat replies with the draft model differ from those without.\n");
    return 1;
  }
  std::fprintf(out, "\nthe replies with the draft model equal those without, in fewer steps over the servers.\n");
  return 0;
}

}  // namespace

int demo_command(const DemoOptions& o, std::FILE* out, std::FILE* err) {
  const std::string path = o.model.empty() ? bundled_model_path() : o.model;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(err,
                 "tensorpc demo: the model %s is missing. The bundled model is made by tools/train/make_model.sh "
                 "(see tools/train/README.md); or pass another GGUF model with -m.\n",
                 path.c_str());
    return 1;
  }
  auto file = LlamaModel::open(path);  // read before any server starts: a bad file costs none
  if (!file.ok()) {
    std::fprintf(err, "tensorpc demo: %s\n", file.status().to_string().c_str());
    return 1;
  }

  const std::string binary = o.server_binary.empty() ? executable_dir() + "/tensorpc-server" : o.server_binary;
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> endpoints;
  std::vector<std::string> device_flags;
  for (int d = 0; d < kDevicesPerServer; ++d) device_flags.insert(device_flags.end(), {"--device", "cpu:1"});
  for (int i = 0; i < 2; ++i) {
    auto s = ServerProcess::start(binary, device_flags, std::chrono::seconds(10));
    if (!s.ok()) {
      std::fprintf(err, "tensorpc demo: cannot start a server: %s\n", s.status().to_string().c_str());
      return 1;
    }
    std::fprintf(out, "started tensorpc-server (pid %d) on %s with devices cpu0, cpu1 (one thread each)\n",
                 static_cast<int>(s.value()->pid()), s.value()->endpoint().c_str());
    endpoints.push_back(s.value()->endpoint());
    servers.push_back(std::move(s).value());
  }

  GenerationOptions g;
  g.max_tokens = o.n_predict;
  g.sampling.temperature = 0;        // greedy: the same logits must give the same text
  g.sampling.repeat_penalty = 1.1f;  // a tiny model loops without it; deterministic all the same
  auto stream_to_out = [out](std::string_view piece, int32_t) {
    std::fwrite(piece.data(), 1, piece.size(), out);
    std::fflush(out);
    return true;
  };

  std::string distributed;
  {
    // The local CPU is left out, so every layer runs on a server.
    ModelOptions options = where(endpoints, 512);
    options.on_open = [&](const ModelInfo& m) {
      std::fprintf(out, "\nmodel %s (%.2f M parameters), spread over %zu server devices:\n", path.c_str(),
                   static_cast<double>(m.parameters) / 1e6, options.split.size());
      return Status();
    };
    UploadProgress bar(err);
    options.on_progress = bar.callback();
    auto model = ModelInternals::open(std::move(file).value(), options);
    bar.end();
    if (!model.ok()) {
      std::fprintf(err, "tensorpc demo: %s\n", model.status().to_string().c_str());
      return 1;
    }
    std::fprintf(out, "%s\n%s", model.value().info().placement.c_str(), o.prompt.c_str());
    auto r = model.value().generate(o.prompt, g, stream_to_out);
    std::fprintf(out, "\n\n");
    if (!r.ok()) {
      std::fprintf(err, "tensorpc demo: distributed generation: %s\n", r.status().to_string().c_str());
      return 1;
    }
    print_speed(r.value(), out);
    distributed = r.value().text;
  }

  std::fprintf(out, "\nthe same on the local CPU alone:\n%s", o.prompt.c_str());
  ModelOptions local_options = where({}, 512);
  local_options.path = path;
  auto model = Model::open(local_options);
  if (!model.ok()) {
    std::fprintf(err, "tensorpc demo: local placement: %s\n", model.status().to_string().c_str());
    return 1;
  }
  auto local = model.value().generate(o.prompt, g, stream_to_out);
  std::fprintf(out, "\n\n");
  if (!local.ok()) {
    std::fprintf(err, "tensorpc demo: local generation: %s\n", local.status().to_string().c_str());
    return 1;
  }
  print_speed(local.value(), out);
  if (local.value().text != distributed) {
    std::fprintf(out, "\nMISMATCH: the text generated across the servers differs from the local one.\n");
    return 1;
  }
  std::fprintf(out, "\nthe text generated across 2 servers x 2 devices equals the local CPU's, token for token.\n");
  // With the bundled models, the BPE chat model too.
  if (o.model.empty() && ::stat(bundled_chat_model_path().c_str(), &st) == 0) {
    if (const int rc = chat_demo(endpoints, out, err); rc != 0) return rc;
  }
  for (auto& s : servers) s->stop();
  std::fprintf(out, "servers stopped.\n");
  return 0;
}

void add_demo_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd =
      app.add_subcommand("demo", "run a model across two local tensorpc servers and check it against the local CPU");
  auto o = std::make_shared<DemoOptions>();
  cmd->add_option("-m,--model", o->model, "a GGUF model (default: the bundled " + bundled_model_path() + ")");
  cmd->add_option("-p,--prompt", o->prompt, "the text to continue")->capture_default_str();
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate")
      ->check(whole_number(1, INT32_MAX))
      ->capture_default_str();
  cmd->callback([o, exit_code] { *exit_code = demo_command(*o, stdout, stderr); });
}

}  // namespace tensorpc::tools
