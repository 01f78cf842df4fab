// PlacedModel: a model opened, its devices connected, and its layers placed
// and uploaded on them — what the public tensorpc::Model holds and what the
// `tensorpc` commands build (tools/model_setup.h), made one way for
// both by place_model().
//
// Ownership: members go in reverse order of destruction: the placement
// (which holds buffers on the devices) before the devices, the devices
// before the model whose descriptors the placement bound.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/device_set.h"
#include "model/arch/llama_model.h"
#include "model/runtime/placement.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc {

struct PlacedModel {
  std::unique_ptr<LlamaModel> model;
  DeviceSet devices;
  std::unique_ptr<ModelPlacement> placement;
};

// Where a model runs.
struct PlaceOptions {
  std::vector<std::string> endpoints;  // servers whose devices to use, in order
  RemoteOptions remote;                // their key and TLS; default: the environment's
  std::vector<double> split;           // layers per device in proportion; empty: by free memory
  int threads = 0;                     // local CPU threads, 0: every core
  int64_t n_ctx = 0;                   // KV-cache positions; 0: the model's, at most 2048
  bool use_local = true;               // the local devices first in the device list
  std::vector<std::string> local_devices{"cpu"};  // which, in order (DeviceSet::connect)
};

// Puts the model on the connected devices: ModelPlacement::create, or a
// caller's wrapper around it that reports what it does.
using PlaceFunction =
    std::function<StatusOr<std::unique_ptr<ModelPlacement>>(const LlamaModel& model, const DeviceSet& devices)>;

// Connects the devices `options` names, checks the split against them, and
// places `model` on them with `place`. A failure is one line naming what
// failed (the server, the split and the devices in order, the upload).
StatusOr<PlacedModel> place_model(std::unique_ptr<LlamaModel> model, const PlaceOptions& options,
                                  const PlaceFunction& place);

}  // namespace tensorpc
