// tensorpc-hello: builds a small feed-forward graph, computes it on the CPU
// device, and prints what happened. The smallest complete use of the API.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"

using namespace tensorpc;

namespace {

std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

int run() {
  constexpr int64_t kDim = 256, kHidden = 512, kClasses = 10, kTokens = 4;
  CpuDevice device;
  std::printf("device: %s (%s)\n", device.name().c_str(), device.description().c_str());

  // Weights: a q8_0 up-projection and an f16 down-projection in one buffer.
  Context weights;
  Tensor* w_up = weights.new_tensor(DType::q8_0, {kDim, kHidden}, "w_up");
  Tensor* w_gate = weights.new_tensor(DType::q8_0, {kDim, kHidden}, "w_gate");
  Tensor* w_down = weights.new_tensor(DType::f16, {kHidden, kClasses}, "w_down");
  const uint64_t align = device.alignment();
  const auto aligned = [&](uint64_t n) { return (n + align - 1) / align * align; };
  const uint64_t bytes = aligned(w_up->nbytes()) + aligned(w_gate->nbytes()) + aligned(w_down->nbytes());
  std::unique_ptr<Buffer> weight_buffer = device.allocate(bytes).value();
  uint64_t offset = 0;
  std::mt19937 rng(42);
  for (Tensor* w : {w_up, w_gate, w_down}) {
    if (Status s = weight_buffer->place(*w, offset); !s.ok()) throw Error(s);
    offset += aligned(w->nbytes());
    std::vector<float> v = random_values(static_cast<size_t>(w->nelements()), rng);
    for (float& x : v) x *= 0.05f;
    if (Status s = write_from_f32(*w, v); !s.ok()) throw Error(s);
  }

  // The graph: probs = softmax(w_down · swiglu(w_gate·n, w_up·n)), n = rms_norm(x).
  Context ctx;
  Tensor* x = ctx.new_tensor(DType::f32, {kDim, kTokens}, "x");
  x->flags |= kFlagInput;
  Tensor* n = ctx.rms_norm(x, 1e-5f);
  Tensor* h = ctx.swiglu(ctx.mul_mat(w_gate, n), ctx.mul_mat(w_up, n));
  Tensor* logits = ctx.mul_mat(w_down, h);
  Tensor* probs = ctx.soft_max(logits);
  Tensor* best = ctx.argmax(probs);
  Graph graph = Graph::build({probs, best});

  GraphAllocator allocator(device);
  if (Status s = allocator.allocate(graph); !s.ok()) throw Error(s);
  std::printf("graph: %zu nodes; activations need %llu bytes (%llu without reuse)\n", graph.n_nodes(),
              static_cast<unsigned long long>(allocator.last_plan().peak),
              static_cast<unsigned long long>(allocator.last_plan().sum_of_sizes));
  if (Status s = write_from_f32(*x, random_values(kDim * kTokens, rng)); !s.ok()) throw Error(s);

  std::unique_ptr<Stream> stream = device.create_stream().value();
  const auto t0 = std::chrono::steady_clock::now();
  if (Status s = stream->compute(graph); !s.ok()) throw Error(s);
  const auto t1 = std::chrono::steady_clock::now();

  const std::vector<float> p = read_as_f32(*probs).value();
  const std::vector<float> b = read_as_f32(*best).value();
  for (int64_t t = 0; t < kTokens; ++t) {
    std::printf("token %lld: class %d (p = %.3f); probabilities", static_cast<long long>(t),
                static_cast<int>(b[t]), p[t * kClasses + static_cast<int64_t>(b[t])]);
    for (int64_t c = 0; c < kClasses; ++c) std::printf(" %.3f", p[t * kClasses + c]);
    std::printf("\n");
  }
  std::printf("computed in %.3f ms\n", std::chrono::duration<double, std::milli>(t1 - t0).count());
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const Error& e) {
    std::fprintf(stderr, "tensorpc-hello: %s\n", e.what());
    return 1;
  }
}
