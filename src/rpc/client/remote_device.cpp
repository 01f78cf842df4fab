// RemoteDevice: facts and memory read over a borrowed connection, buffers
// and streams that keep one.
#include "rpc/client/remote_device.h"

#include <map>
#include <utility>

#include "rpc/client/remote_buffer.h"
#include "rpc/client/remote_plan.h"
#include "rpc/client/remote_stream.h"
#include "rpc/transport/connection.h"
#include "rpc/wire/graph_codec.h"

namespace tensorpc::rpc {
namespace {

// The canonical form, so that "localhost:1" typed two ways names one cache
// entry; text that does not parse is kept and fails at first use.
std::string canonical(const std::string& endpoint) {
  auto parsed = parse_endpoint(endpoint);
  return parsed.ok() ? parsed.value().to_string() : endpoint;
}

}  // namespace

std::chrono::milliseconds open_timeout_of(const RemoteOptions& options) {
  const auto t = options.reply_timeout;
  return t.count() > 0 && t < kOpenTimeout ? t : kOpenTimeout;
}

StatusOr<std::vector<DeviceInfo>> list_devices(const std::string& endpoint, const RemoteOptions& options) {
  TENSORPC_ASSIGN_OR_RETURN(auto connection,
                            get_connection(endpoint, credentials_of(options), open_timeout_of(options)));
  TENSORPC_ASSIGN_OR_RETURN(auto fields,
                            connection->call({.command = Command::list_devices, .timeout = options.reply_timeout}));
  WireReader r(fields);
  ListDevicesReply reply;
  const Status s = decode(r, reply);
  if (!s.ok()) return Status(s.code(), "LIST_DEVICES to " + connection->endpoint() + ": " + s.message());
  return std::move(reply.devices);
}

Device& RemoteDeviceLink::device() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (device_ != nullptr) return *device_;
  // Kept for the process: a reference handed out must stay good. One per
  // endpoint and index, however many buffers outlive their device.
  static std::mutex stand_ins_mutex;
  static auto* stand_ins = new std::map<std::pair<std::string, uint32_t>, std::unique_ptr<RemoteDevice>>();
  std::lock_guard<std::mutex> stand_ins_lock(stand_ins_mutex);
  auto& stand_in = (*stand_ins)[{endpoint_, index_}];
  if (!stand_in) stand_in = std::make_unique<RemoteDevice>(endpoint_, index_, options_);
  return *stand_in;
}

void RemoteDeviceLink::set_device(RemoteDevice* device) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_ = device;
}

RemoteDevice::RemoteDevice(std::string endpoint, uint32_t index, RemoteOptions options, std::optional<DeviceInfo> known)
    : link_(std::make_shared<RemoteDeviceLink>(canonical(endpoint), index, std::move(options))),
      info_(std::move(known)) {
  link_->set_device(this);
}

RemoteDevice::~RemoteDevice() { link_->set_device(nullptr); }

std::chrono::milliseconds RemoteDevice::open_timeout() const { return open_timeout_of(options()); }

StatusOr<DeviceInfo> RemoteDevice::info() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (info_) return *info_;
  TENSORPC_ASSIGN_OR_RETURN(const std::vector<DeviceInfo> devices, list_devices(endpoint(), options()));
  if (index() >= devices.size()) {
    return not_found("device " + std::to_string(index()) + " of " + endpoint() + " does not exist (the server has " +
                     std::to_string(devices.size()) + ")");
  }
  info_ = devices[index()];
  return *info_;
}

DeviceKind RemoteDevice::processor() const {
  auto i = info();
  if (!i.ok() || i.value().kind > static_cast<uint32_t>(DeviceKind::gpu)) return DeviceKind::remote;
  return static_cast<DeviceKind>(i.value().kind);
}

std::string RemoteDevice::name() const {
  auto i = info();
  return endpoint() + "/" + (i.ok() ? i.value().name : "device" + std::to_string(index()));
}

std::string RemoteDevice::description() const {
  auto i = info();
  return i.ok() ? i.value().description : "unreachable: " + i.status().message();
}

StatusOr<MemoryInfo> RemoteDevice::memory() const {
  TENSORPC_ASSIGN_OR_RETURN(auto connection, get_connection(endpoint(), credentials_of(options()), open_timeout()));
  DeviceMemoryReply reply;
  TENSORPC_RETURN_IF_ERROR(
      connection->call(Command::device_memory, DeviceMemoryRequest{.device = index()}, reply, reply_timeout()));
  return MemoryInfo{.free = reply.free, .total = reply.total};
}

uint64_t RemoteDevice::alignment() const {
  auto i = info();
  // A server reporting 0 would make every placement divide by zero.
  return i.ok() && i.value().alignment != 0 ? i.value().alignment : kUnreachableAlignment;
}

uint64_t RemoteDevice::max_allocation() const {
  auto i = info();
  return i.ok() ? i.value().max_allocation : 0;
}

bool RemoteDevice::supports(const Tensor& node) const {
  if (static_cast<uint32_t>(node.op) >= kOpCount) return false;
  // Ops, and forms of ops, newer than 1.0 go only to servers that said they compute them.
  uint32_t needs = 0;
  if (node.op == Op::top_k) needs = kTopKMinor;
  if (node.op == Op::sample) needs = kSampleMinor;
  if (node.op == Op::set_rows && !node.rows_are_contiguous()) needs = kStridedSetRowsMinor;
  if (node.op == Op::tanh ||
      (node.op == Op::rope && (node.src[2] != nullptr || (node.param<int32_t>(kRopeParamMode) & kRopeYarnBit) != 0))) {
    needs = kRopeTanhMinor;
  }
  const auto reads_mxfp4 = [&] {
    for (const Tensor* s : node.src) {
      if (s != nullptr && s->type == DType::mxfp4) return true;
    }
    return node.type == DType::mxfp4;
  };
  if (node.op == Op::mul_mat_id || node.op == Op::top_k_ids || node.op == Op::swiglu_clamp || node.op == Op::sigmoid ||
      (node.op == Op::soft_max && node.src[2] != nullptr) || reads_mxfp4()) {
    needs = kMoeMinor;
  }
  // A server's CPU device computes every op its version knows; other kinds
  // (a GPU) compute some, which a 1.11 server says (SUPPORTS).
  auto i = info();
  const bool ask = i.ok() && i.value().kind != static_cast<uint32_t>(DeviceKind::cpu);
  if (needs == 0 && !ask) return true;
  auto connection = get_connection(endpoint(), credentials_of(options()), open_timeout());
  if (!connection.ok() || connection.value()->server_hello().minor < needs) return false;
  return !ask || connection.value()->server_hello().minor < kSupportsMinor || ask_supports(node);
}

bool RemoteDevice::ask_supports(const Tensor& node) const {
  WireWriter w;
  encode(w, SupportsRequest{.device = index()});
  const size_t prefix = w.size();
  if (!encode_unplaced_node(w, node).ok()) return false;
  std::string key(w.bytes().begin() + static_cast<std::ptrdiff_t>(prefix), w.bytes().end());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = supports_.find(key); it != supports_.end()) return it->second;
  }
  auto connection = get_connection(endpoint(), credentials_of(options()), open_timeout());
  if (!connection.ok()) return false;
  auto fields =
      connection.value()->call({.command = Command::supports, .fields = w.bytes(), .timeout = reply_timeout()});
  SupportsReply reply;
  if (!fields.ok()) return false;  // not remembered: a later plan asks again
  WireReader r(fields.value());
  if (!decode(r, reply).ok() || reply.computes.empty()) return false;
  const bool computes = reply.computes.back();  // the node is the graph's last
  std::lock_guard<std::mutex> lock(mutex_);
  supports_.emplace(std::move(key), computes);
  return computes;
}

StatusOr<std::unique_ptr<Buffer>> RemoteDevice::allocate(uint64_t size) {
  TENSORPC_ASSIGN_OR_RETURN(auto connection, get_connection(endpoint(), credentials_of(options()), open_timeout()));
  BufferAllocReply reply;
  TENSORPC_RETURN_IF_ERROR(connection->call(Command::buffer_alloc, BufferAllocRequest{.device = index(), .size = size},
                                            reply, reply_timeout()));
  if (reply.handle == 0) {
    return Status(StatusCode::protocol_error, "BUFFER_ALLOC to " + endpoint() + ": the server issued handle 0");
  }
  return std::unique_ptr<Buffer>(std::make_unique<RemoteBuffer>(link_, std::move(connection), reply.handle, size));
}

StatusOr<std::unique_ptr<Stream>> RemoteDevice::create_stream() {
  TENSORPC_ASSIGN_OR_RETURN(auto connection, get_connection(endpoint(), credentials_of(options()), open_timeout()));
  return std::unique_ptr<Stream>(std::make_unique<RemoteStream>(link_, std::move(connection)));
}

StatusOr<std::unique_ptr<PlanRunner>> RemoteDevice::create_plan_runner() {
  TENSORPC_ASSIGN_OR_RETURN(auto connection, get_connection(endpoint(), credentials_of(options()), open_timeout()));
  return std::unique_ptr<PlanRunner>(std::make_unique<RemotePlanRunner>(std::move(connection), options().reply_timeout));
}

DeviceTraffic RemoteDevice::traffic() const {
  const ConnectionStats s = connection_stats(endpoint());
  return {.channel = endpoint(),
          .round_trips = s.round_trips,
          .bytes_sent = s.bytes_sent,
          .bytes_received = s.bytes_received};
}

}  // namespace tensorpc::rpc
