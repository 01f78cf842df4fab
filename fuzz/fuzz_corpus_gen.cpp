// Writes the seed corpora of the fuzz targets: real encodings of graphs (each
// fitting the 4 KiB buffer graph_decode_fuzz names as handle 1) and of every
// message, and tiny llama models. Usage: fuzz_corpus_gen <fuzz/corpus directory>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "lab/random_model.h"
#include "rpc/wire/graph_codec.h"
#include "rpc/wire/messages.h"
#include "rpc/wire/plan_codec.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"

namespace {

using namespace tensorpc;
using namespace tensorpc::rpc;

void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Builds outputs in a fresh context, places them with a GraphAllocator and
// encodes them with the allocator's buffer as handle 1.
std::vector<uint8_t> encode_built(const std::function<std::vector<Tensor*>(Context&)>& build) {
  CpuDevice dev(CpuDeviceOptions{.threads = 1});
  Context ctx;
  Graph g = Graph::build(build(ctx));
  GraphAllocator alloc(dev);
  if (!alloc.allocate(g).ok() || alloc.buffer()->size() > 4096) {
    std::fprintf(stderr, "fuzz_corpus_gen: a seed graph does not fit 4 KiB\n");
    std::exit(1);
  }
  WireWriter w;
  if (!encode_graph(w, g, [](const Buffer*) -> uint64_t { return 1; }).ok()) std::exit(1);
  return w.bytes();
}

template <typename M>
std::vector<uint8_t> bytes_of(const M& m) {
  WireWriter w;
  encode(w, m);
  return w.bytes();
}

// A client's byte stream for session_fuzz: frames, each a header and its payload.
class Transcript {
 public:
  template <typename M>
  Transcript& add(Command command, const M& message, const std::vector<uint8_t>& tail = {}, uint16_t flags = 0) {
    WireWriter w;
    encode(w, message);
    std::vector<uint8_t> payload = w.bytes();
    payload.insert(payload.end(), tail.begin(), tail.end());
    return frame(command, payload, flags);
  }
  Transcript& frame(Command command, const std::vector<uint8_t>& payload, uint16_t flags = 0) {
    uint8_t header[kFrameHeaderSize];
    encode_header(FrameHeader{.command = command, .flags = flags, .request_id = ++id_, .payload_length = payload.size()},
                  header);
    bytes_.insert(bytes_.end(), header, header + kFrameHeaderSize);
    bytes_.insert(bytes_.end(), payload.begin(), payload.end());
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
  uint64_t id_ = 0;
};

// One execution-plan step's fixed fields, and for COMPUTE its graph.
std::vector<uint8_t> plan_steps(const std::vector<std::pair<PlanStepFields, std::vector<uint8_t>>>& steps) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(steps.size()));
  for (const auto& [fields, graph] : steps) {
    encode_step(w, fields);
    w.raw(graph.data(), graph.size());
  }
  return w.bytes();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus directory>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  const auto graphs = root / "graph_decode_fuzz";
  const auto messages = root / "messages_fuzz";
  std::filesystem::create_directories(graphs);
  std::filesystem::create_directories(messages);

  const std::vector<std::pair<const char*, std::function<std::vector<Tensor*>(Context&)>>> seeds = {
      {"add",
       [](Context& c) {
         return std::vector<Tensor*>{c.add(c.new_tensor(DType::f32, {8, 2}), c.new_tensor(DType::f32, {8}))};
       }},
      {"mul_mat_q8_0",
       [](Context& c) {
         return std::vector<Tensor*>{c.mul_mat(c.new_tensor(DType::q8_0, {32, 4}), c.new_tensor(DType::f32, {32, 2}))};
       }},
      {"mul_mat_q4_0_f16",
       [](Context& c) {
         Tensor* x = c.new_tensor(DType::f32, {32, 2});
         return std::vector<Tensor*>{c.mul_mat(c.new_tensor(DType::q4_0, {32, 4}), x),
                                     c.mul_mat(c.new_tensor(DType::f16, {32, 4}), x)};
       }},
      {"attention",
       [](Context& c) {
         Tensor* x = c.new_tensor(DType::f32, {8, 2, 4});
         Tensor* r = c.rope(x, c.new_tensor(DType::i32, {4}), 8, kRopeNeox);
         Tensor* q = c.permute(r, 0, 2, 1, 3);
         Tensor* kq = c.mul_mat(c.cont(q), q);
         return std::vector<Tensor*>{
             c.soft_max(c.diag_mask_inf(c.scale(kq, 0.5f), 1), c.new_tensor(DType::f32, {4, 4}))};
       }},
      {"norms",
       [](Context& c) {
         Tensor* x = c.new_tensor(DType::f32, {16, 3});
         return std::vector<Tensor*>{c.rms_norm(x, 1e-5f), c.norm(x, 1e-5f), c.swiglu(c.silu(x), c.gelu(x))};
       }},
      {"cache_store",
       [](Context& c) {
         Tensor* cache = c.new_tensor(DType::f16, {16, 8});
         return std::vector<Tensor*>{c.cpy(c.new_tensor(DType::f32, {16, 2}), c.view(cache, {16, 2}, {2, 32}, 64)),
                                     c.cast(c.new_tensor(DType::f32, {32, 2}), DType::q8_0)};
       }},
      {"rows_concat_argmax",
       [](Context& c) {
         Tensor* rows = c.get_rows(c.new_tensor(DType::q8_0, {32, 6}), c.new_tensor(DType::i32, {3}));
         Tensor* cat = c.concat(rows, c.new_tensor(DType::f32, {32, 2}), 1);
         return std::vector<Tensor*>{c.argmax(cat), c.cont(c.transpose(c.reshape(cat, {16, 10})))};
       }},
      {"rope_yarn_tanh",
       [](Context& c) {
         // rope with frequency factors and YaRN (params 4..7, src[2]), and tanh.
         RopeParams p;
         p.n_dims = 8;
         p.mode = kRopeNeox;
         p.freq_scale = 0.25f;
         p.n_ctx_orig = 64;
         p.ext_factor = 1.0f;
         Tensor* x = c.new_tensor(DType::f32, {8, 2, 4});
         Tensor* r = c.rope(x, c.new_tensor(DType::i32, {4}), p, c.new_tensor(DType::f32, {4}));
         return std::vector<Tensor*>{c.tanh(r)};
       }},
  };
  for (const auto& [name, build] : seeds) write_file(graphs / name, encode_built(build));

  write_file(messages / "hello_request", bytes_of(HelloRequest{.client = "fuzz"}));
  write_file(messages / "hello_reply", bytes_of(HelloReply{.server = "tensorpc-server"}));
  write_file(messages / "hello_reply_key",
             bytes_of(HelloReply{.features = kFeatureKey, .server = "tensorpc-server", .server_nonce = {}}));
  write_file(messages / "auth_request", bytes_of(AuthRequest{}));
  ListDevicesReply devices;
  devices.devices.push_back({"cpu", "2 threads", 0, 1, 2, 64, 3});
  write_file(messages / "list_devices_reply", bytes_of(devices));
  write_file(messages / "buffer_alloc_request", bytes_of(BufferAllocRequest{.device = 0, .size = 4096}));
  write_file(messages / "buffer_clear_request", bytes_of(BufferClearRequest{.handle = 1, .value = 7}));
  write_file(messages / "set_tensor_hash_request", bytes_of(SetTensorHashRequest{.handle = 1, .size = 64}));
  write_file(messages / "copy_tensor_request", bytes_of(CopyTensorRequest{1, 0, 2, 64, 128}));
  write_file(messages / "set_tensor_hash_reply", bytes_of(SetTensorHashReply{.found = true}));
  const SetTensorHashesRequest hashes{.entries = {SetTensorHashRequest{.handle = 1, .offset = 0, .size = 64},
                                                  SetTensorHashRequest{.handle = 1, .offset = 64, .size = 64}}};
  write_file(messages / "set_tensor_hashes_request", bytes_of(hashes));
  write_file(messages / "set_tensor_hashes_reply", bytes_of(SetTensorHashesReply{.found = {true, false, true}}));
  WireWriter status;
  encode_status(status, invalid_argument("bad shape"));
  write_file(messages / "status_error", status.bytes());
  uint8_t header[kFrameHeaderSize];
  encode_header(
      FrameHeader{.command = Command::set_tensor, .flags = kFlagNoReply, .request_id = 9, .payload_length = 88},
      header);
  write_file(messages / "header", std::vector<uint8_t>(header, header + kFrameHeaderSize));

  // Whole connections for session_fuzz. Handles count from 1 in each session;
  // the seed graphs name handle 1, a 4 KiB buffer on device 0.
  const auto sessions = root / "session_fuzz";
  std::filesystem::create_directories(sessions);
  const std::vector<uint8_t> add_graph = encode_built(seeds[0].second);
  const std::vector<uint8_t> q8_graph = encode_built(seeds[1].second);
  const std::vector<uint8_t> bytes64(64, 0x3c);
  const auto opened = [] {
    Transcript t;
    t.add(Command::hello, HelloRequest{.client = "fuzz"});
    t.add(Command::buffer_alloc, BufferAllocRequest{.device = 0, .size = 4096});
    return t;
  };
  {
    Transcript t = opened();
    t.frame(Command::list_devices, {});
    t.add(Command::device_memory, DeviceMemoryRequest{.device = 1});
    t.add(Command::set_tensor, SetTensorRequest{.handle = 1, .offset = 0, .size = 64}, bytes64);
    t.add(Command::buffer_clear, BufferClearRequest{.handle = 1, .value = 0x3c});
    t.add(Command::copy_tensor, CopyTensorRequest{1, 0, 1, 128, 64});
    t.add(Command::graph_compute, GraphComputeRequest{.device = 0, .graph_id = 5}, add_graph);
    t.add(Command::graph_recompute, GraphRecomputeRequest{.device = 0, .graph_id = 5}, {}, kFlagNoReply);
    t.frame(Command::synchronize, {});
    t.add(Command::get_tensor, GetTensorRequest{.handle = 1, .offset = 64, .size = 64});
    t.frame(Command::ping, {});
    t.add(Command::buffer_free, BufferFreeRequest{.handle = 1});
    write_file(sessions / "buffers_and_graphs", t.bytes());
  }
  {
    Transcript t = opened();
    t.add(Command::buffer_alloc, BufferAllocRequest{.device = 1, .size = 4096});
    t.add(Command::set_tensor_hash, SetTensorHashRequest{.handle = 1, .offset = 0, .size = 64});
    t.add(Command::set_tensor, SetTensorRequest{.handle = 1, .offset = 0, .size = 64}, bytes64, kFlagCache);
    t.add(Command::set_tensor_hash, SetTensorHashRequest{.handle = 2, .offset = 64, .size = 64});
    t.add(Command::set_tensor_hashes, hashes);
    t.add(Command::grant_write, GrantWriteRequest{.handle = 2, .offset = 0, .size = 64});
    t.add(Command::copy_to_peer, CopyToPeerRequest{.src_handle = 1, .size = 64, .endpoint = "127.0.0.1:1"});
    t.add(Command::write_granted, WriteGrantedRequest{.size = 64}, bytes64);
    write_file(sessions / "cache_and_grants", t.bytes());
  }
  {
    Transcript t = opened();
    t.add(Command::buffer_alloc, BufferAllocRequest{.device = 1, .size = 4096});
    t.add(Command::grant_standing, GrantStandingRequest{.handle = 2, .offset = 0, .size = 256});
    PlanStepFields compute{.kind = PlanStepKind::compute, .device = 0};
    PlanStepFields copy{.kind = PlanStepKind::copy, .src_handle = 1, .src_offset = 0, .dst_handle = 1,
                        .dst_offset = 2048, .size = 256};
    PlanStepFields send{.kind = PlanStepKind::send_to_peer, .src_handle = 1, .size = 64, .endpoint = "127.0.0.1:1"};
    PlanStepFields wait{.kind = PlanStepKind::wait_for, .endpoint = "127.0.0.1:1", .timeout_ms = 1};
    t.add(Command::plan_store, PlanStoreRequest{.plan_id = 3},
          plan_steps({{compute, add_graph}, {copy, {}}, {compute, q8_graph}}));
    t.add(Command::plan_run, PlanRunRequest{.plan_id = 3}, {}, kFlagNoReply);
    t.add(Command::plan_run, PlanRunRequest{.plan_id = 3}, {}, kFlagNoReply);
    t.frame(Command::synchronize, {});
    t.add(Command::plan_store, PlanStoreRequest{.plan_id = 4}, plan_steps({{send, {}}, {wait, {}}}));
    t.add(Command::plan_run, PlanRunRequest{.plan_id = 4});
    t.add(Command::buffer_free, BufferFreeRequest{.handle = 1});
    t.add(Command::plan_run, PlanRunRequest{.plan_id = 3});
    write_file(sessions / "execution_plans", t.bytes());
  }
  {
    // A client that claims a key: the keyed server checks its proof (which
    // cannot match), the server without a key refuses the AUTH.
    Transcript t;
    t.add(Command::hello, HelloRequest{.features = kFeatureKey, .client = "fuzz"});
    AuthRequest auth;
    auth.client_nonce.fill(0x11);
    auth.client_proof.fill(0x22);
    t.add(Command::auth, auth);
    t.add(Command::buffer_alloc, BufferAllocRequest{.device = 0, .size = 4096});
    write_file(sessions / "key_handshake", t.bytes());
  }

  // model_fuzz: the smallest models the loader takes, f32 and q8_0 (whose
  // rows need 32 columns), with every byte token in the vocabulary.
  const auto models = root / "model_fuzz";
  std::filesystem::create_directories(models);
  const std::pair<const char*, tools::RandomModelOptions> tiny[] = {
      {"tiny_f32", {.n_vocab = 262, .n_embd = 8, .n_layer = 1, .n_head = 2, .n_head_kv = 1, .n_ff = 16, .n_ctx = 32}},
      {"tiny_q8_0",
       {.n_vocab = 259,
        .n_embd = 32,
        .n_layer = 1,
        .n_head = 2,
        .n_head_kv = 1,
        .n_ff = 32,
        .n_ctx = 32,
        .type = DType::q8_0}},
  };
  for (const auto& [name, options] : tiny) {
    if (Status s = tools::write_random_llama((models / name).string(), options); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, s.message().c_str());
      return 1;
    }
  }
  return 0;
}
