// The public entry points of the client (include/tensorpc/rpc_client.h).
#include "tensorpc/rpc_client.h"

#include "rpc/transport/connection.h"
#include "rpc/client/remote_device.h"

namespace tensorpc {

StatusOr<std::vector<std::unique_ptr<Device>>> connect_devices(const std::string& endpoint,
                                                               const RemoteOptions& options) {
  TENSORPC_ASSIGN_OR_RETURN(std::vector<rpc::DeviceInfo> devices, rpc::list_devices(endpoint, options));
  std::vector<std::unique_ptr<Device>> out;
  for (size_t i = 0; i < devices.size(); ++i) {
    out.push_back(
        std::make_unique<rpc::RemoteDevice>(endpoint, static_cast<uint32_t>(i), options, std::move(devices[i])));
  }
  return out;
}

std::unique_ptr<Device> remote_device(const std::string& endpoint, uint32_t index, const RemoteOptions& options) {
  return std::make_unique<rpc::RemoteDevice>(endpoint, index, options);
}

ConnectionStats connection_stats(const std::string& endpoint) {
  const std::shared_ptr<rpc::Connection> c = rpc::find_live_connection(endpoint);
  return c ? c->stats() : ConnectionStats{};
}

Status ping(const std::string& endpoint, const RemoteOptions& options) {
  TENSORPC_ASSIGN_OR_RETURN(auto connection,
                            rpc::get_connection(endpoint, rpc::credentials_of(options), rpc::open_timeout_of(options)));
  return connection->call_status_only(rpc::Command::ping, {}, options.reply_timeout);
}

Status check_session(const std::string& endpoint, const RemoteOptions& options) {
  const std::shared_ptr<rpc::Connection> c = rpc::find_live_connection(endpoint);
  if (c == nullptr || c->defunct()) return io_error(endpoint + ": the connection to the server ended");
  return c->call_status_only(rpc::Command::ping, {}, options.reply_timeout);
}

}  // namespace tensorpc
