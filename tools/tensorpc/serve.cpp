// `tensorpc serve` (serve.h).
#include "tensorpc/serve.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "api/model_internals.h"
#include "cli_checks.h"
#include "serve/engine.h"
#include "serve/http_server.h"
#include "signal_watch.h"
#include "tensorpc/chat.h"

namespace tensorpc::tools {
namespace {

// The key from --api-key or the first line of --api-key-file.
StatusOr<std::string> api_key_of(const ServeOptions& o) {
  if (o.api_key_file.empty()) return o.api_key;
  TENSORPC_ASSIGN_OR_RETURN(std::string text, read_text_file(o.api_key_file));
  text = text.substr(0, text.find_first_of("\r\n"));
  if (text.empty()) return invalid_argument("--api-key-file " + o.api_key_file + ": the file's first line is empty");
  return text;
}

// What /v1/cluster shows: each device, its layers, its memory now.
serve::ClusterView cluster_of(const std::string& model_id, const LlamaModel& model, const ModelPlacement& placement,
                              int parallel) {
  serve::ClusterView v;
  v.model = model_id;
  v.n_layer = model.hparams().n_layer;
  v.n_ctx = placement.n_ctx() / parallel;
  v.parallel = parallel;
  const std::vector<size_t>& layer_device = placement.layer_device();
  std::map<std::string, uint32_t> per_endpoint;
  for (size_t d = 0; d < placement.devices().size(); ++d) {
    const Device& dev = *placement.devices()[d];
    serve::DeviceView dv;
    dv.name = dev.name();
    dv.endpoint = dev.kind() == DeviceKind::remote ? dev.traffic().channel : "local";
    if (dev.kind() == DeviceKind::remote && dv.name.rfind(dv.endpoint + "/", 0) == 0) {
      dv.name = dv.name.substr(dv.endpoint.size() + 1);
    }
    dv.index = per_endpoint[dv.endpoint]++;
    for (size_t l = 0; l < layer_device.size(); ++l) {
      if (layer_device[l] != d) continue;
      if (dv.first_layer < 0) dv.first_layer = static_cast<int64_t>(l);
      dv.last_layer = static_cast<int64_t>(l);
    }
    dv.embedding = !layer_device.empty() && layer_device.front() == d;
    dv.output = !layer_device.empty() && layer_device.back() == d;
    if (auto m = dev.memory(); m.ok()) {
      dv.memory_total = m.value().total;
      dv.memory_free = m.value().free;
    }
    v.devices.push_back(std::move(dv));
  }
  return v;
}

std::string model_id_of(const ServeOptions& o) {
  if (!o.alias.empty()) return o.alias;
  std::string stem = std::filesystem::path(o.setup.model).filename().string();
  if (stem.size() > 5 && stem.ends_with(".gguf")) stem.resize(stem.size() - 5);
  return stem;
}

}  // namespace

int serve_command(const ServeOptions& o, std::FILE* out, std::FILE* err, std::atomic<bool>* stop) {
  const auto fail = [err](const std::string& what) {
    std::fprintf(err, "tensorpc serve: %s\n", what.c_str());
    return 1;
  };
  auto key = api_key_of(o);
  if (!key.ok()) return fail(key.status().message());

  serve::HttpOptions http;
  http.host = o.host;
  http.port = o.port;
  http.api_key = key.value();
  http.max_body = o.max_body;
  http.model_id = model_id_of(o);
  http.tls_cert = o.http_cert;
  http.tls_key = o.http_key;
  http.header_timeout_s = o.header_timeout_s;
  http.keep_alive_timeout_s = o.keep_alive_timeout_s;
  http.max_connections = o.max_connections;
  serve::HttpServer server(http);
  if (const Status s = server.bind(); !s.ok()) return fail(s.message());
  std::thread listener([&server] { server.listen(); });
  const char* scheme = o.http_cert.empty() ? "http" : "https";
  std::fprintf(err, "listening on %s://%s:%d/ (the model is loading)\n", scheme, o.host.c_str(), server.port());

  // Everything below is destroyed before the listener stops: the engine
  // outlives no request, the placement no engine.
  std::unique_ptr<serve::Engine> engine;
  std::optional<Model> opened_model;
  const auto shut_down = [&](int code) {
    server.stop();
    listener.join();
    engine.reset();
    return code;
  };
  // The model could not be served: /health says why until the listener stops.
  const auto failed_loading = [&](const Status& s) {
    server.set_failed(s.message());
    fail(s.message());
    return shut_down(1);
  };
  // Loading cannot stop midway (a file read, a server's answer): a stop asked
  // meanwhile ends the process, and the servers free what it held as its
  // connections close.
  std::atomic<bool> loaded{false};
  std::thread stop_while_loading([&] {
    while (!loaded.load() && !stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (loaded.load()) return;
    std::fprintf(err, "tensorpc serve: stopped while loading the model\n");
    std::fflush(err);
    std::fflush(out);
    std::_Exit(1);
  });
  struct LoadWatch {
    std::atomic<bool>& loaded;
    std::thread& watcher;
    void done() {
      loaded.store(true);
      if (watcher.joinable()) watcher.join();
    }
    ~LoadWatch() { done(); }
  } load_watch{loaded, stop_while_loading};
  server.set_loading("opening " + o.setup.model);
  auto opened = LlamaModel::open(o.setup.model);
  if (!opened.ok()) {
    return failed_loading(opened.status());
  }
  std::optional<ChatTemplate> chat_template;
  std::string template_error;
  if (auto t = choose_template(*opened.value(), o.chat_template); t.ok()) {
    chat_template = std::move(t).value();
  } else if (!o.chat_template.empty()) {
    fail(t.status().message());
    return shut_down(1);
  } else {
    template_error = t.status().message();
    std::fprintf(err, "no chat template: /v1/chat/completions is refused (%s)\n", template_error.c_str());
  }
  ModelSetup setup = o.setup;
  const int64_t per_slot = setup.n_ctx > 0
                               ? setup.n_ctx
                               : std::min<int64_t>(std::max<int64_t>(opened.value()->hparams().n_ctx_train, 1), 2048);
  setup.n_ctx = per_slot * o.parallel;
  setup.n_seq = o.parallel;
  server.set_loading("placing the model on its devices");
  auto m = open_model(std::move(opened).value(), setup, err);
  if (!m.ok()) {
    return failed_loading(m.status());
  }
  opened_model = std::move(m).value();
  const PlacedModel& placed = ModelInternals::placed(*opened_model);
  ClusterRecovery* recovery = ModelInternals::recovery(*opened_model);
  const GeneratorOptions go = ModelInternals::generator_options(*opened_model);
  serve::EngineOptions eo;
  eo.parallel = o.parallel;
  eo.n_batch = o.n_batch;
  eo.queue = o.queue;
  eo.lookup = o.lookup.lookup;
  eo.draft_max = o.lookup.draft_max;
  if (Model* draft = ModelInternals::draft(*opened_model)) {
    eo.draft_model = ModelInternals::placed(*draft).model.get();
    eo.draft_placement = ModelInternals::placed(*draft).placement.get();
  }
  eo.recovery = go.recovery;
  eo.scheduler = go.scheduler;
  eo.log = [err](const std::string& line) {
    std::fprintf(err, "%s\n", line.c_str());
    std::fflush(err);
  };
  auto e = serve::Engine::create(*placed.model, *placed.placement, eo);
  if (!e.ok()) {
    return failed_loading(e.status());
  }
  engine = std::move(e).value();

  serve::ServedModel served;
  served.engine = engine.get();
  served.chat_template = chat_template;
  served.chat_template_error = template_error;
  served.endpoints = setup.endpoints;
  std::error_code size_error;
  served.file_bytes = std::filesystem::file_size(o.setup.model, size_error);  // 0 when it cannot be read
  const LlamaModel* model = placed.model.get();
  const ModelPlacement* placement = placed.placement.get();
  const int parallel = o.parallel;
  served.cluster = [id = http.model_id, model, placement, parallel, recovery] {
    if (recovery == nullptr) return cluster_of(id, *model, *placement, parallel);
    // The placement a recovery made; none while one is under way.
    serve::ClusterView v{
        .model = id, .n_layer = model->hparams().n_layer, .n_ctx = 0, .parallel = parallel, .devices = {}};
    recovery->with_placement([&](const ModelPlacement* now) {
      if (now != nullptr) v = cluster_of(id, *model, *now, parallel);
    });
    return v;
  };
  if (recovery != nullptr) {
    served.recovery = [recovery] {
      const RecoveryState r = recovery->state();
      return serve::RecoveryView{.health = r.health,
                                 .reason = r.reason,
                                 .serving = r.serving,
                                 .recoveries = r.recoveries,
                                 .failures = r.failures,
                                 .tokens_replayed = r.tokens_replayed,
                                 .seconds = r.seconds};
    };
  }
  server.set_model(std::move(served));
  load_watch.done();
  std::fprintf(out, "serving %s at %s://%s:%d/ (%d slots of %lld positions)\n", http.model_id.c_str(), scheme,
               o.host.c_str(), server.port(), o.parallel, static_cast<long long>(per_slot));
  std::fflush(out);

  while (!stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(err, "stopping\n");
  return shut_down(0);
}

void add_serve_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "serve", "serve a model over an OpenAI-compatible HTTP API and a web page, requests generated together");
  auto o = std::make_shared<ServeOptions>();
  cmd->add_option("-m,--model", o->setup.model, "the model, a GGUF file (llama, qwen2, qwen3, phi3, gemma, gemma2)")
      ->required();
  auto where = ModelSetupFlags::add_to(*cmd);
  cmd->add_option("--host", o->host, "the address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "the port to listen on (0: any free one)")
      ->check(whole_number(0, 65535))
      ->capture_default_str();
  cmd->add_option("--parallel", o->parallel, "requests generated at once (slots)")
      ->check(whole_number(1, 256))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size,--ctx", o->setup.n_ctx,
                  "positions of each slot: a request's prompt and reply together (0: the model's, at most 2048)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  cmd->add_option("-b,--batch", o->n_batch, "tokens of one step at most: decoding slots' tokens, then prompt chunks")
      ->check(whole_number(1, 65536))
      ->capture_default_str();
  cmd->add_option("--queue", o->queue, "requests that wait for a slot at most; beyond, 503 with Retry-After")
      ->check(whole_number(0, 4096))
      ->capture_default_str();
  add_lookup_flags(*cmd, &o->lookup, &o->setup);
  auto* key = cmd->add_option("--api-key", o->api_key, "clients must send Authorization: Bearer KEY");
  cmd->add_option("--api-key-file", o->api_key_file, "the same, the key being the file's first line")->excludes(key);
  cmd->add_option("--alias", o->alias, "the model's name in the API (default: the file's name without .gguf)");
  cmd->add_option("--chat-template", o->chat_template,
                  "render conversations with this template family instead of the model's");
  cmd->add_option("--max-body", o->max_body, "bytes of a request body at most, whatever its encoding (413 beyond)")
      ->check(whole_number(1024, 1ll << 30))
      ->capture_default_str();
  cmd->add_option("--header-timeout", o->header_timeout_s,
                  "seconds a request's headers may take from its first byte; beyond, the connection closes")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", o->keep_alive_timeout_s,
                  "seconds a connection may wait without a request before it closes")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--max-connections", o->max_connections,
                  "connections open at once; beyond, a new one is answered 503 and closed")
      ->check(whole_number(1, 1 << 20))
      ->capture_default_str();
  auto* cert = cmd->add_option("--http-tls-cert", o->http_cert, "serve HTTPS with this certificate (PEM)");
  auto* tls_key = cmd->add_option("--http-tls-key", o->http_key, "the private key of --http-tls-cert (PEM)");
  cert->needs(tls_key);
  tls_key->needs(cert);
  cmd->callback([o, where, exit_code] {
    ServeOptions options = *o;
    where->apply(options.setup);
    std::atomic<bool> stop{false};
    // Before the server starts its threads; a second signal ends a load or a shutdown that takes too long.
    SignalWatch watch({SIGINT, SIGTERM}, &stop, SignalWatch::Again::end_process);
    *exit_code = serve_command(options, stdout, stderr, &stop);
  });
}

}  // namespace tensorpc::tools
