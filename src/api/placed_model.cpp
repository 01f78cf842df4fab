// Connecting and placing a model (placed_model.h).
#include "api/placed_model.h"

namespace tensorpc {

StatusOr<PlacedModel> place_model(std::unique_ptr<LlamaModel> model, const PlaceOptions& options,
                                  const PlaceFunction& place) {
  PlacedModel p;
  p.model = std::move(model);
  const std::vector<std::string> local = options.use_local ? options.local_devices : std::vector<std::string>{};
  TENSORPC_ASSIGN_OR_RETURN(p.devices, DeviceSet::connect(local, options.threads, options.endpoints, options.remote));
  std::vector<Device*> list = p.devices.devices();
  if (p.devices.helper_cpu()) list.pop_back();  // holds no layers: not in the split
  if (!options.split.empty() && options.split.size() != list.size()) {
    std::string names;
    for (Device* d : list) {
      names += ' ';
      names += d->name();
    }
    return invalid_argument("--split gives " + std::to_string(options.split.size()) + " ratios for " +
                            std::to_string(list.size()) + " devices (in order:" + names + ")");
  }
  TENSORPC_ASSIGN_OR_RETURN(p.placement, place(*p.model, p.devices));
  return p;
}

}  // namespace tensorpc
