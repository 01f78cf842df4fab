// Helpers of the scheduler tests: a tiny transformer whose weights are spread
// over a list of devices layer by layer, its graph, its per-step inputs, and
// a device that refuses one op. Owned by the scheduler's tests.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "tensorpc/scheduler.h"
#include "test_util.h"

namespace tensorpc::test {

// A llama-shaped model: embeddings, n_layers of (attention, SwiGLU FFN),
// output norm and head. Weights of layer l live on devices[layer_device(l)];
// embeddings on the first device, the head on the last.
struct TinyModel {
  static constexpr int64_t kDim = 64, kHeads = 4, kHeadDim = 16, kFfn = 128, kVocab = 48;
  static constexpr int kLayers = 4;

  struct Layer {
    Tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *wg, *wu, *wd;
  };

  TinyModel(const std::vector<Device*>& devices, const std::function<size_t(int)>& layer_device = {}) {
    const size_t n = devices.size();
    const auto dev_of = [&](int l) { return layer_device ? layer_device(l) : static_cast<size_t>(l) * n / kLayers; };
    embd = weight(devices[0], {kDim, kVocab});
    for (int l = 0; l < kLayers; ++l) {
      Device* d = devices[dev_of(l)];
      layers.push_back({weight(d, {kDim}), weight(d, {kDim, kDim}), weight(d, {kDim, kDim}), weight(d, {kDim, kDim}),
                        weight(d, {kDim, kDim}), weight(d, {kDim}), weight(d, {kDim, kFfn}), weight(d, {kDim, kFfn}),
                        weight(d, {kFfn, kDim})});
    }
    out_norm = weight(devices[n - 1], {kDim});
    head = weight(devices[n - 1], {kDim, kVocab});
    place_all();
  }

  // The graph of one step over T tokens: outputs {logits [V, T], argmax [T]}.
  struct Step {
    Tensor *tokens, *pos, *mask, *logits, *ids;
  };
  Step build(Context& ctx, int64_t T) const {
    Step s;
    s.tokens = input(ctx, DType::i32, {T}, "tokens");
    s.pos = input(ctx, DType::i32, {T}, "pos");
    s.mask = input(ctx, DType::f32, {T, T}, "mask");
    Tensor* x = ctx.get_rows(embd, s.tokens);
    for (const Layer& L : layers) {
      // Attention: x += wo · softmax(k·q / sqrt(d) + mask) · v, q and k rotated.
      Tensor* h = ctx.mul(ctx.rms_norm(x, 1e-5f), L.attn_norm);
      Tensor* q = ctx.rope(ctx.reshape(ctx.mul_mat(L.wq, h), {kHeadDim, kHeads, T}), s.pos, kHeadDim, kRopeNeox);
      Tensor* k = ctx.rope(ctx.reshape(ctx.mul_mat(L.wk, h), {kHeadDim, kHeads, T}), s.pos, kHeadDim, kRopeNeox);
      Tensor* v = ctx.reshape(ctx.mul_mat(L.wv, h), {kHeadDim, kHeads, T});
      Tensor* kq = ctx.mul_mat(ctx.permute(k, 0, 2, 1, 3), ctx.permute(q, 0, 2, 1, 3));  // [T, T, H]
      kq = ctx.soft_max(kq, s.mask, 1.0f / std::sqrt(static_cast<float>(kHeadDim)));
      Tensor* vt = ctx.cont(ctx.permute(v, 1, 2, 0, 3));  // [T, hd, H]
      Tensor* kqv = ctx.mul_mat(vt, kq);                  // [hd, T, H]
      Tensor* o = ctx.reshape(ctx.cont(ctx.permute(kqv, 0, 2, 1, 3)), {kDim, T});
      x = ctx.add(x, ctx.mul_mat(L.wo, o));
      // FFN: x += wd · (silu(wg · h) * (wu · h)).
      h = ctx.mul(ctx.rms_norm(x, 1e-5f), L.ffn_norm);
      x = ctx.add(x, ctx.mul_mat(L.wd, ctx.swiglu(ctx.mul_mat(L.wg, h), ctx.mul_mat(L.wu, h))));
    }
    x = ctx.mul(ctx.rms_norm(x, 1e-5f), out_norm);
    s.logits = ctx.mul_mat(head, x);
    s.logits->name = "logits";
    s.ids = ctx.argmax(s.logits);
    s.ids->name = "ids";
    return s;
  }

  // The step's inputs (tokens, positions from n_past, causal mask), written
  // through the caller's tensors once they are placed.
  static void write_inputs(const Step& s, int64_t T, uint32_t seed) {
    const auto tokens = random_ints(T, seed, 0, static_cast<int32_t>(kVocab - 1));
    std::vector<int32_t> pos(static_cast<size_t>(T));
    std::vector<float> mask(static_cast<size_t>(T * T));
    for (int64_t i = 0; i < T; ++i) {
      pos[static_cast<size_t>(i)] = static_cast<int32_t>(i + 3);
      for (int64_t j = 0; j < T; ++j) mask[static_cast<size_t>(i * T + j)] = j > i ? -INFINITY : 0.0f;
    }
    check(s.tokens->buffer->set(*s.tokens, tokens.data(), 0, s.tokens->nbytes()), "set tokens");
    check(s.pos->buffer->set(*s.pos, pos.data(), 0, s.pos->nbytes()), "set pos");
    check(write_from_f32(*s.mask, mask), "set mask");
  }

  static std::vector<uint8_t> bytes_of(const Tensor* t) {
    std::vector<uint8_t> b(t->nbytes());
    check(t->buffer->get(*t, b.data(), 0, b.size()), "get " + t->name);
    return b;
  }

  Tensor* embd;
  std::vector<Layer> layers;
  Tensor* out_norm;
  Tensor* head;

 private:
  Tensor* weight(Device* d, std::initializer_list<int64_t> ne) {
    Tensor* t = ctx_.new_tensor(DType::f32, ne, "w" + std::to_string(order_.size()));
    t->flags |= kFlagWeight;
    order_.push_back({t, d});
    return t;
  }

  // One buffer per device; values seeded by the weight's number, so every
  // spread of the model holds the same weights.
  void place_all() {
    std::map<Device*, uint64_t> sizes;
    const auto up = [](uint64_t n, uint64_t a) { return (n + a - 1) / a * a; };
    for (auto& [t, d] : order_) sizes[d] += up(t->nbytes(), d->alignment());
    std::map<Device*, Buffer*> buffer;
    std::map<Device*, uint64_t> used;
    for (auto& [d, size] : sizes) {
      auto b = d->allocate(size);
      check(b.status(), "allocate weights");
      buffers_.push_back(std::move(b).value());
      buffer[d] = buffers_.back().get();
    }
    uint32_t seed = 100;
    for (auto& [t, d] : order_) {
      check(buffer[d]->place(*t, used[d]), "place weight");
      used[d] += up(t->nbytes(), d->alignment());
      check(write_from_f32(*t, random_floats(t->nelements(), seed++, -0.5f, 0.5f)), "write weight");
    }
  }

  Context ctx_;
  std::vector<std::pair<Tensor*, Device*>> order_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// A step's results, byte for byte: the logits and the top ids.
struct TinyOutputs {
  std::vector<uint8_t> logits, ids;
  bool operator==(const TinyOutputs&) const = default;
};

inline CpuDeviceOptions two_threads(const std::string& name) { return {.name = name, .threads = 2}; }

// A step of `tokens` tokens with the inputs of `seed`, computed on one CPU
// device without the scheduler: what every spread of the model must match.
inline TinyOutputs tiny_reference(int64_t tokens, uint32_t seed) {
  CpuDevice cpu(two_threads("ref"));
  TinyModel model({&cpu});
  Context ctx;
  auto step = model.build(ctx, tokens);
  GraphRun run(cpu, {step.logits, step.ids});
  TinyModel::write_inputs(step, tokens, seed);
  run.compute();
  return {TinyModel::bytes_of(step.logits), TinyModel::bytes_of(step.ids)};
}

// A buffer in host memory of its own, reporting `device` as its device.
class HostBuffer final : public Buffer {
 public:
  HostBuffer(Device& device, uint64_t size) : device_(device), bytes_((size + 63) / 64 + 1), size_(size) {}
  Device& device() const override { return device_; }
  uint64_t size() const override { return size_; }
  void* host_base() const override { return const_cast<Block*>(bytes_.data()); }
  Status set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override {
    TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "set"));
    if (size) std::memcpy(static_cast<char*>(host_base()) + t.offset + offset, src, size);
    return Status();
  }
  Status get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const override {
    TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "get"));
    if (size) std::memcpy(dst, static_cast<char*>(host_base()) + t.offset + offset, size);
    return Status();
  }
  Status clear(uint8_t value) override {
    std::memset(host_base(), value, size_);
    return Status();
  }
  Status copy(const Tensor& src, const Tensor& dst) override {
    TENSORPC_RETURN_IF_ERROR(check_range(dst, 0, dst.nbytes(), "copy"));
    if (src.data == nullptr) return unsupported("copy: source not in host memory");
    std::memmove(static_cast<char*>(host_base()) + dst.offset, src.data, dst.nbytes());
    return Status();
  }

 private:
  struct alignas(64) Block {
    char b[64];
  };
  Device& device_;
  std::vector<Block> bytes_;
  uint64_t size_;
};

// A CPU device that refuses one op: computes through `inner`, holds its
// bytes in HostBuffers of its own.
class RefusingDevice final : public Device {
 public:
  RefusingDevice(CpuDevice& inner, Op refused) : inner_(inner), refused_(refused) {}
  std::string name() const override { return "refuses-" + std::string(name_of(refused_)); }
  std::string description() const override { return "test device"; }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  StatusOr<MemoryInfo> memory() const override { return inner_.memory(); }
  uint64_t alignment() const override { return 64; }
  uint64_t max_allocation() const override { return inner_.max_allocation(); }
  bool supports(const Tensor& node) const override { return node.op != refused_ && inner_.supports(node); }
  StatusOr<std::unique_ptr<Buffer>> allocate(uint64_t size) override {
    return std::unique_ptr<Buffer>(std::make_unique<HostBuffer>(*this, size));
  }
  StatusOr<std::unique_ptr<Stream>> create_stream() override { return inner_.create_stream(); }

 private:
  CpuDevice& inner_;
  Op refused_;
};

}  // namespace tensorpc::test
