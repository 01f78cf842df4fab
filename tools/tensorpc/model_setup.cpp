// Opening, connecting and placing a model for a command (model_setup.h).
#include "tensorpc/model_setup.h"

#include <CLI/CLI.hpp>
#include <fstream>
#include <iterator>

#include "cli_checks.h"
#include "device_spec.h"

namespace tensorpc::tools {

StatusOr<PlacedModel> place_model(const ModelSetup& setup, std::FILE* err) {
  TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(setup.model));  // its message names the file once
  return place_model(std::move(model), setup, err);
}

StatusOr<PlacedModel> place_model(std::unique_ptr<LlamaModel> model, const ModelSetup& setup, std::FILE* err) {
  PlaceOptions where;
  TENSORPC_ASSIGN_OR_RETURN(where.remote, remote_options(setup.client));
  where.endpoints = setup.endpoints;
  where.split = setup.split;
  where.threads = setup.threads;
  where.n_ctx = setup.n_ctx;
  where.use_local = setup.use_local;
  auto placed = tensorpc::place_model(std::move(model), where, [&](const LlamaModel& m, const DeviceSet& devices) {
    const LlamaHparams& hp = m.hparams();
    std::fprintf(err, "model %s: %lld layers, %lld embd, %lld heads (%lld kv), vocab %lld, %.1f M parameters\n",
                 setup.model.c_str(), static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_embd),
                 static_cast<long long>(hp.n_head), static_cast<long long>(hp.n_head_kv),
                 static_cast<long long>(hp.n_vocab), static_cast<double>(m.parameter_count()) / 1e6);
    const int64_t per_sequence = setup.n_ctx / std::max<int64_t>(setup.n_seq, 1);
    if (hp.n_ctx_train > 0 && per_sequence > hp.n_ctx_train) {
      std::fprintf(err,
                   "warning: a context of %lld positions is beyond the %lld the model was trained for; "
                   "text past %lld may degrade\n",
                   static_cast<long long>(per_sequence), static_cast<long long>(hp.n_ctx_train),
                   static_cast<long long>(hp.n_ctx_train));
    }
    return load_model(m, devices.devices(), devices.endpoints(), setup.split, setup.n_ctx, err);
  });
  if (!placed.ok()) return placed.status();
  std::fprintf(err, "%s", placed.value().placement->table().c_str());
  return placed;
}

StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return io_error("cannot read " + path);
  return text;
}

std::shared_ptr<ModelSetupFlags> ModelSetupFlags::add_to(CLI::App& cmd) {
  auto f = std::make_shared<ModelSetupFlags>();
  auto* rpc = cmd.add_option("--rpc", f->rpc_, "servers whose devices to use, host:port[,host:port…] (repeatable)");
  add_client_flags(cmd, f->client_);
  cmd.add_option("--split", f->split_,
                 "layers per device in proportion, one ratio per device in order (default: by free memory)")
      ->check([](const std::string& s) {
        auto r = parse_split(s);
        return r.ok() ? std::string() : r.status().message();
      });
  cmd.add_option("-t,--threads", f->threads_, "threads of the local CPU (0: every core)")
      ->check(check_thread_count)
      ->capture_default_str();
  auto* local_only = cmd.add_flag("--local-only", f->local_only_, "use the local CPU only");
  local_only->excludes(rpc);
  cmd.add_flag("--no-local", f->no_local_, "use only the servers' devices, not the local CPU")
      ->needs(rpc)
      ->excludes(local_only);
  return f;
}

void ModelSetupFlags::apply(ModelSetup& setup) const {
  setup.endpoints = split_endpoints(rpc_);
  setup.split = split_.empty() ? std::vector<double>{} : parse_split(split_).value();  // checked by the option
  setup.client = client_;
  setup.threads = threads_;
  setup.use_local = !no_local_;
}

}  // namespace tensorpc::tools
