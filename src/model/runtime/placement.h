// ModelPlacement: where each part of a llama model lives — which device runs
// which layers — and the buffers that hold its weights and KV cache there.
//
// Layers go to devices in contiguous runs, in the order of the device list,
// in proportion to explicit ratios (`--split 1,1,2`) or, by default, to each
// device's free memory; where GPUs and CPUs are mixed, the GPUs first take
// as many layers as fit and the CPUs the rest (layers_by_room). The token embedding lives with the first layer, the
// output norm and projection with the last; each layer's KV cache lives on
// that layer's device when the device computes the cache writes (a GPU may
// not), else on a device of the same server (or this process) that does,
// else on a CPU. Tensor overrides (PlacementOptions::overrides) come first:
// a weight whose GGUF name an override's pattern is found in lives on that
// override's device, whatever its layer's device; by free memory, the layers
// are then shared out by what each device has left after the overrides (the
// scheduler runs a node where its weights live, so the computation follows
// the weight). create() checks every device has room before
// allocating anything, then allocates one buffer per device and uploads the
// weights from the file's mapping, 64 MiB at a time (Buffer::set_tensors: a
// remote device asks its server's weights cache about 16 MiB of tensors per
// round trip and sends only what the server lacks). Each tensor goes with
// its digest in the model's memo (LlamaModel::digests), which a remote
// device uses instead of hashing, or fills in; the memo is saved after the
// upload when it learnt something, and failing to save it fails nothing
// (WeightDigests::save_failure says why).
//
// Ownership: the placement owns its buffers and the cache descriptors; it
// binds the model's weight descriptors to its buffers, so one model has at
// most one placement at a time, and the model and the devices outlive it.
#pragma once

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "model/arch/llama_model.h"
#include "tensorpc/device.h"

namespace tensorpc {

// Weights whose GGUF name (`blk.3.ffn_up.weight`) `pattern`, an ECMAScript
// regular expression, is found in (std::regex_search) go to the device whose
// Device::name() is `device` ("cpu", "vulkan:0", "127.0.0.1:50052/cpu0").
struct PlacementOverride {
  std::string pattern;
  std::string device;
};

struct PlacementOptions {
  std::vector<double> ratios{};  // one per device (≥ 0, not all 0); empty: by free memory
  // By free memory, the last device takes no layers (a helper CPU that runs
  // what the others cannot compute); with ratios, give it 0.
  bool last_takes_no_layers = false;
  // In order; a weight goes where the first one that matches it says.
  std::vector<PlacementOverride> overrides{};
  int64_t n_ctx = 0;             // KV cache positions; 0: the model's context, at most 2048
  DType cache_type = DType::f32;
  // Called after each batch of tensors is uploaded: bytes done, bytes in all,
  // device name.
  std::function<void(uint64_t, uint64_t, const std::string&)> progress{};
};

class ModelPlacement {
 public:
  static StatusOr<std::unique_ptr<ModelPlacement>> create(const LlamaModel& model, std::vector<Device*> devices,
                                                          PlacementOptions options);

  const KvCache& cache() const { return cache_; }
  int64_t n_ctx() const { return cache_.n_ctx; }
  const std::vector<Device*>& devices() const { return devices_; }
  // Index into devices() of each layer's device.
  const std::vector<size_t>& layer_device() const { return layer_device_; }
  // What one of PlacementOptions::overrides put on its device.
  struct OverrideUse {
    PlacementOverride override;
    size_t device = 0;  // index into devices()
    size_t tensors = 0;
    uint64_t bytes = 0;  // as the device holds them (aligned)
  };
  const std::vector<OverrideUse>& overrides() const { return overrides_; }
  // A table: device, layers, weight bytes, KV-cache bytes; then, with
  // overrides, what each put where.
  std::string table() const;
  uint64_t weight_bytes() const;

  // Every cache position back to zero (a new sequence).
  Status clear_cache();

 private:
  ModelPlacement() = default;

  std::vector<Device*> devices_;
  std::vector<size_t> layer_device_;
  std::vector<uint64_t> device_weights_;  // per device
  std::vector<uint64_t> device_cache_;    // per device
  std::vector<OverrideUse> overrides_;
  Context cache_ctx_;
  KvCache cache_;
  std::vector<std::unique_ptr<Buffer>> weight_buffers_;  // per device (null when it holds nothing)
  std::vector<std::unique_ptr<Buffer>> cache_buffers_;
};

// The compiled pattern of an override, or invalid_argument quoting it with
// std::regex's complaint.
StatusOr<std::regex> override_regex(const std::string& pattern);

// The KV-cache positions a placement asked for `requested` (PlacementOptions::n_ctx)
// gets: `requested`, or for 0 the model's context, at most 2048.
int64_t context_positions(const LlamaHparams& hp, int64_t requested);

// How many of n_layer layers each device gets for these weights (largest
// remainder, contiguous in device order). Exposed for tests.
std::vector<int64_t> layers_per_device(int64_t n_layer, const std::vector<double>& weights);

// One device's part in the default split: the bytes it has for layers, and
// whether it is a GPU.
struct LayerRoom {
  uint64_t bytes = 0;
  bool gpu = false;
  uint64_t keep = 0;  // a GPU's bytes that layers are not to fill (activations, the ends)
};

// The default split (no ratios): by room, except where GPUs and CPUs are
// mixed. Then the GPUs come first: they take as many layers of layer_bytes
// as fit in their room less what they keep (shared among them by that fit),
// and the CPUs the rest (shared by room). Exposed for tests.
std::vector<int64_t> layers_by_room(int64_t n_layer, const std::vector<LayerRoom>& rooms, uint64_t layer_bytes);

}  // namespace tensorpc
