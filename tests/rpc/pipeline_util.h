// A two-stage pipeline for the multi-device tests: stage 1 computes
// h = silu(w1 · x) on one device, h is handed over to a buffer of another
// device, and stage 2 computes y = silu(w2 · h) there. The hand-over is the
// caller's, so each test can choose (and measure) how the bytes travel.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "test_util.h"

namespace tensorpc::test {

// One stage on `device`: out = silu(w · in), placed by a GraphAllocator.
struct Stage {
  Stage(Device& device, int64_t k, int64_t m, int64_t n) : alloc(device) {
    w = input(ctx, DType::f32, {k, m});
    in = input(ctx, DType::f32, {k, n});
    out = ctx.silu(ctx.mul_mat(w, in));
    graph = Graph::build({out});
    check(alloc.allocate(graph), "GraphAllocator::allocate");
    auto s = device.create_stream();
    check(s.status(), "create_stream");
    stream = std::move(s).value();
  }
  void compute() { check(stream->compute(graph), "Stream::compute"); }

  Context ctx;
  Tensor* w = nullptr;
  Tensor* in = nullptr;
  Tensor* out = nullptr;
  Graph graph;
  GraphAllocator alloc;
  std::unique_ptr<Stream> stream;
};

// The hand-over: s2.in's bytes must become s1.out's.
using Handover = std::function<void(Stage& s1, Stage& s2)>;

// The hand-over through this process: read, then write.
inline void relay(Stage& s1, Stage& s2) {
  std::vector<uint8_t> bytes(s1.out->nbytes());
  check(s1.out->buffer->get(*s1.out, bytes.data(), 0, bytes.size()), "get");
  check(s2.in->buffer->set(*s2.in, bytes.data(), 0, bytes.size()), "set");
}

// Runs the pipeline with h of n columns of 1024 f32 (4 KiB each: n = 1024
// makes a 4 MiB hand-over) and returns y.
inline std::vector<float> run_pipeline(Device& d1, Device& d2, const Handover& handover, int64_t n = 1024) {
  Stage s1(d1, 64, 1024, n);
  Stage s2(d2, 1024, 16, n);
  check(write_from_f32(*s1.w, random_floats(64 * 1024, 11)), "write w1");
  check(write_from_f32(*s1.in, random_floats(64 * n, 12)), "write x");
  check(write_from_f32(*s2.w, random_floats(1024 * 16, 13)), "write w2");
  s1.compute();
  handover(s1, s2);
  s2.compute();
  auto y = read_as_f32(*s2.out);
  check(y.status(), "read y");
  return std::move(y).value();
}

// The same pipeline on two local CPU devices of 2 threads (as the servers'
// devices of the tests have, so results match bit for bit).
inline std::vector<float> local_pipeline(int64_t n = 1024) {
  CpuDevice a(CpuDeviceOptions{.threads = 2}), b(CpuDeviceOptions{.threads = 2});
  return run_pipeline(a, b, relay, n);
}

}  // namespace tensorpc::test
