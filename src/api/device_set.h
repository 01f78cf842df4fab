// DeviceSet: the devices a model is spread over — the local CPU and every
// device of every tensorpc server named — in placement order, and who owns
// them. The public tensorpc::Model and the `tensorpc` commands both connect
// through it.
//
// Ownership: the set owns its devices; whatever holds buffers or streams of
// them (a ModelPlacement, a Generator) must be destroyed first.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc {

class DeviceSet {
 public:
  // The local CPU first (`local_threads`, 0: every core) when `use_local`,
  // then every device of every endpoint in order, connected with `options`
  // (their key). An unreachable server, or one that refuses the key, is an
  // error naming its endpoint.
  static StatusOr<DeviceSet> connect(bool use_local, int local_threads, const std::vector<std::string>& endpoints,
                                     const RemoteOptions& options = {});

  std::vector<Device*> devices() const;
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  std::vector<std::unique_ptr<Device>> owned_;
  std::vector<std::string> endpoints_;
};

}  // namespace tensorpc
