// DeviceSet: the devices a model is spread over — the local devices named
// (the CPU, Vulkan GPUs) and every device of every tensorpc server named —
// in placement order, and who owns them. The public tensorpc::Model and the
// `tensorpc` commands both connect through it.
//
// Ownership: the set owns its devices; whatever holds buffers or streams of
// them (a ModelPlacement, a Generator) must be destroyed first.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc {

class DeviceSet {
 public:
  // The local devices first, in the order `local` names them — "cpu" (with
  // `local_threads`, 0: every core), "vulkan" (every Vulkan device) or
  // "vulkan:N" — then every device of every endpoint in order, connected
  // with `options` (their key). A name the build or the machine cannot give
  // (no Vulkan driver, no such device), an unreachable server, or one that
  // refuses the key, is an error naming it.
  //
  // When the local devices include a GPU and no CPU, a local CPU joins the
  // list last as the helper (helper_cpu()): it holds no layers, and runs the
  // nodes the GPUs do not compute (Scheduler: the first CPU that can).
  static StatusOr<DeviceSet> connect(const std::vector<std::string>& local, int local_threads,
                                     const std::vector<std::string>& endpoints, const RemoteOptions& options = {});

  std::vector<Device*> devices() const;
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // The server of devices()[i]; "" for a local device.
  const std::string& server_of(size_t i) const { return servers_[i]; }
  // Puts the devices server `with` lists now where those of `endpoint` (one
  // of endpoints()) were — the same endpoint again after a restart, or a
  // standby in its place; an empty `with` drops them. The old devices are
  // destroyed: whatever held buffers or streams of them must be gone. A
  // server that cannot be listed, or lists none, is an error naming it, and
  // leaves the set as it was.
  Status replace_server(const std::string& endpoint, const std::string& with, const RemoteOptions& options);
  // The devices server `endpoint` lists now, after the other servers' (and
  // before the helper CPU). An error naming it leaves the set as it was.
  Status add_server(const std::string& endpoint, const RemoteOptions& options);
  // The helper CPU is the last of devices().
  bool helper_cpu() const { return helper_cpu_; }

 private:
  Status add_local(const std::string& name, int local_threads);

  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<std::string> servers_;  // per device: its server, "" when local
  std::vector<std::string> endpoints_;
  bool helper_cpu_ = false;
  std::map<int, int> openings_;  // of each Vulkan device, for their names
};

}  // namespace tensorpc
