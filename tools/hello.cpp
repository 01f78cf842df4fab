// tensorpc-hello: builds a small feed-forward graph and computes it twice —
// on the local CPU device, and on a device of a tensorpc server listening on
// a loopback port — then shows both give the same bits. The smallest
// complete use of the API, local and remote.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"
#include "tensorpc/rpc_client.h"
#include "tensorpc/server.h"

using namespace tensorpc;

namespace {

constexpr int64_t kDim = 256, kHidden = 512, kClasses = 10, kTokens = 4;

void check(const Status& s) {
  if (!s.ok()) throw Error(s);
}

std::vector<float> random_values(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Result {
  std::vector<float> probs;
  std::vector<float> best;
  double ms = 0;
};

// Puts the weights on `device`, builds
//   probs = softmax(w_down · swiglu(w_gate·n, w_up·n)),  n = rms_norm(x)
// and computes it there.
Result run_on(Device& device) {
  std::mt19937 rng(42);  // the same weights and input on every device
  Context weights;
  Tensor* w_up = weights.new_tensor(DType::q8_0, {kDim, kHidden}, "w_up");
  Tensor* w_gate = weights.new_tensor(DType::q8_0, {kDim, kHidden}, "w_gate");
  Tensor* w_down = weights.new_tensor(DType::f16, {kHidden, kClasses}, "w_down");
  const uint64_t align = device.alignment();
  const auto aligned = [&](uint64_t n) { return (n + align - 1) / align * align; };
  const uint64_t bytes = aligned(w_up->nbytes()) + aligned(w_gate->nbytes()) + aligned(w_down->nbytes());
  std::unique_ptr<Buffer> weight_buffer = device.allocate(bytes).value();
  uint64_t offset = 0;
  for (Tensor* w : {w_up, w_gate, w_down}) {
    check(weight_buffer->place(*w, offset));
    offset += aligned(w->nbytes());
    check(write_from_f32(*w, random_values(static_cast<size_t>(w->nelements()), rng, 0.05f)));
  }

  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {kDim, kTokens}, "x");
  x->flags |= kFlagInput;
  Tensor* n = ctx.rms_norm(x, 1e-5f);
  Tensor* h = ctx.swiglu(ctx.mul_mat(w_gate, n), ctx.mul_mat(w_up, n));
  Tensor* probs = ctx.soft_max(ctx.mul_mat(w_down, h));
  Tensor* best = ctx.argmax(probs);
  Graph graph = Graph::build({probs, best});

  GraphAllocator allocator(device);
  check(allocator.allocate(graph));
  std::printf("  graph: %zu nodes; activations need %llu bytes (%llu without reuse)\n", graph.n_nodes(),
              static_cast<unsigned long long>(allocator.last_plan().peak),
              static_cast<unsigned long long>(allocator.last_plan().sum_of_sizes));
  check(write_from_f32(*x, random_values(kDim * kTokens, rng, 1.0f)));

  std::unique_ptr<Stream> stream = device.create_stream().value();
  const auto t0 = std::chrono::steady_clock::now();
  check(stream->compute(graph));
  Result r;
  r.probs = read_as_f32(*probs).value();
  r.best = read_as_f32(*best).value();
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void print(const Result& r) {
  for (int64_t t = 0; t < kTokens; ++t) {
    const auto cls = static_cast<int64_t>(r.best[t]);
    std::printf("  token %lld: class %lld (p = %.3f); probabilities", static_cast<long long>(t),
                static_cast<long long>(cls), r.probs[t * kClasses + cls]);
    for (int64_t c = 0; c < kClasses; ++c) std::printf(" %.3f", r.probs[t * kClasses + c]);
    std::printf("\n");
  }
  std::printf("  computed and read back in %.3f ms\n", r.ms);
}

int run() {
  CpuDevice cpu;
  std::printf("local device %s (%s)\n", cpu.name().c_str(), cpu.description().c_str());
  const Result local = run_on(cpu);
  print(local);

  // A server on a loopback port the OS picks, serving one CPU device.
  ServerOptions options;
  options.port = 0;
  std::unique_ptr<Server> server = Server::start(std::move(options)).value();
  const std::string endpoint = "127.0.0.1:" + std::to_string(server->port());
  std::vector<std::unique_ptr<Device>> remote = connect_devices(endpoint).value();
  std::printf("\nremote device %s (%s)\n", remote[0]->name().c_str(), remote[0]->description().c_str());
  const Result over_rpc = run_on(*remote[0]);
  print(over_rpc);

  const bool same = local.probs.size() == over_rpc.probs.size() &&
                    std::memcmp(local.probs.data(), over_rpc.probs.data(), local.probs.size() * sizeof(float)) == 0 &&
                    local.best == over_rpc.best;
  std::printf("\nlocal and remote results are %s\n", same ? "bit-identical" : "DIFFERENT");
  std::fflush(stdout);
  server->stop();
  return same ? 0 : 1;
}

}  // namespace

int main() {
  // The in-process server logs each session at info level; here that is noise.
  if (std::getenv("TENSORPC_LOG") == nullptr) setenv("TENSORPC_LOG", "warn", 1);
  try {
    return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "tensorpc-hello: %s\n", e.what());
    return 1;
  }
}
