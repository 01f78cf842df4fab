// Graphs on the wire: a real graph, encoded on the "client" and decoded on
// the "server" against a copy of its buffer, computes bit-identical results;
// the byte layout of a tensor is pinned against docs/protocol.md; and every
// kind of hostile input — bad types, shapes, strides, ranges, handles,
// sources, ops, params, counts, and every truncation — is refused with an
// error that names the tensor and the problem, before anything runs.
#include "rpc/wire/graph_codec.h"

#include <array>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "rpc_test_util.h"
#include "test_util.h"

namespace tensorpc::test {
namespace {

using rpc::decode_graph;
using rpc::DecodedGraph;
using rpc::encode_graph;
using rpc::WireReader;
using rpc::WireWriter;

bool names(const Status& s, const std::string& needle) { return s.message().find(needle) != std::string::npos; }

// ---- a real graph, end to end ------------------------------------------------------

TEST(GraphCodec, DecodedGraphComputesBitIdenticalResults) {
  CpuDevice dev(CpuDeviceOptions{.threads = 2});
  Context ctx;
  Tensor* w = ctx.new_tensor(DType::q8_0, {64, 32}, "w");
  w->flags |= kFlagWeight;
  Tensor* x = input(ctx, DType::f32, {64, 4}, "x");
  Tensor* gain = input(ctx, DType::f32, {32}, "gain");
  Tensor* pos = input(ctx, DType::i32, {4}, "pos");
  Tensor* ids = input(ctx, DType::i32, {3}, "ids");
  Tensor* cache = input(ctx, DType::f16, {32, 8}, "cache");

  Tensor* h = ctx.mul_mat(w, x);                       // [32, 4]
  Tensor* hn = ctx.mul(ctx.rms_norm(h, 1e-5f), gain);  // [32, 4]
  Tensor* heads = ctx.rope(ctx.reshape(hn, {8, 4, 4}), pos, 8, kRopeNeox);
  Tensor* q = ctx.permute(heads, 0, 2, 1, 3);  // [8, T, H], strided
  Tensor* kq = ctx.mul_mat(ctx.cont(q), q);    // [T, T, H]
  Tensor* probs = ctx.soft_max(ctx.diag_mask_inf(ctx.scale(kq, 0.35f), 0));
  Tensor* stored = ctx.cpy(hn, ctx.view(cache, {32, 4}, {2, 64}, 2 * 64));
  Tensor* picked = ctx.concat(ctx.get_rows(w, ids), x, 1);  // [64, 7]
  Tensor* best = ctx.argmax(picked);
  Tensor* act = ctx.swiglu(ctx.silu(h), ctx.gelu(h));
  Tensor* tr = ctx.cont(ctx.transpose(ctx.add(act, ctx.sub(h, gain))));
  Graph g = Graph::build({probs, stored, best, tr});

  GraphAllocator alloc(dev);
  ASSERT_TRUE(alloc.allocate(g).ok());
  Buffer* client_buf = alloc.buffer();
  std::vector<uint8_t> wbytes = random_encoded(DType::q8_0, 64 * 32, 1);
  ASSERT_TRUE(client_buf->set(*w, wbytes.data(), 0, wbytes.size()).ok());
  ASSERT_TRUE(write_from_f32(*x, random_floats(64 * 4, 2)).ok());
  ASSERT_TRUE(write_from_f32(*gain, random_floats(32, 3)).ok());
  ASSERT_TRUE(write_from_f32(*cache, random_floats(32 * 8, 4)).ok());
  const std::vector<int32_t> positions{0, 1, 2, 7}, rows{31, 0, 5};
  ASSERT_TRUE(client_buf->set(*pos, positions.data(), 0, 16).ok());
  ASSERT_TRUE(client_buf->set(*ids, rows.data(), 0, 12).ok());

  // The "server" computes in its own copy of the buffer.
  auto server_buf = dev.allocate(client_buf->size()).value();
  std::memcpy(server_buf->host_base(), client_buf->host_base(), client_buf->size());

  WireWriter wire;
  const Status enc = encode_graph(wire, g, [&](const Buffer* b) -> uint64_t { return b == client_buf ? 42 : 0; });
  ASSERT_TRUE(enc.ok()) << enc.to_string();
  WireReader r(wire.bytes());
  auto decoded = decode_graph(r, [&](uint64_t handle) -> StatusOr<Buffer*> {
    if (handle == 42) return server_buf.get();
    return not_found("not issued");
  });
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  EXPECT_TRUE(r.done()) << "the graph is the rest of the payload";
  Graph& dg = decoded->graph;
  ASSERT_EQ(dg.leafs().size(), g.leafs().size());
  ASSERT_EQ(dg.nodes().size(), g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    EXPECT_EQ(dg.nodes()[i]->op, g.nodes()[i]->op) << i;
    EXPECT_EQ(dg.nodes()[i]->ne, g.nodes()[i]->ne) << i;
    EXPECT_EQ(dg.nodes()[i]->offset, g.nodes()[i]->offset) << i;
    EXPECT_EQ(dg.nodes()[i]->flags, g.nodes()[i]->flags) << i;
  }

  auto stream = dev.create_stream().value();
  ASSERT_TRUE(stream->compute(g).ok());
  const auto* client_bytes = static_cast<const uint8_t*>(client_buf->host_base());
  const auto* server_bytes = static_cast<const uint8_t*>(server_buf->host_base());
  ASSERT_NE(std::memcmp(client_bytes, server_bytes, client_buf->size()), 0) << "the client graph computed nothing";
  const Status s = stream->compute(dg);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(std::memcmp(client_bytes, server_bytes, client_buf->size()), 0) << "the decoded graph left different bytes";
}

// Sources are written slot by slot: soft_max's sinks (src[2]) without a mask
// (src[1]) come back in slot 2 with slot 1 empty, and mul_mat_id's three
// sources in their order; the decoded graph computes the same bytes.
TEST(GraphCodec, ANodeWithItsMiddleSourceAbsentKeepsItsSourcesInTheirSlots) {
  CpuDevice dev(CpuDeviceOptions{.threads = 2});
  Context ctx;
  Tensor* x = input(ctx, DType::f32, {16, 4, 3}, "x");
  Tensor* sinks = input(ctx, DType::f32, {3}, "sinks");
  Tensor* experts = input(ctx, DType::q4_0, {32, 8, 5}, "experts");
  Tensor* b = input(ctx, DType::f32, {32, 1, 4}, "b");
  Tensor* ids = input(ctx, DType::i32, {2, 4}, "ids");
  Tensor* probs = ctx.soft_max(x, nullptr, 0.5f, sinks);
  Tensor* moe = ctx.mul_mat_id(experts, b, ids);
  Graph g = Graph::build({probs, moe});
  GraphAllocator alloc(dev);
  ASSERT_TRUE(alloc.allocate(g).ok());
  Buffer* client_buf = alloc.buffer();
  ASSERT_TRUE(write_from_f32(*x, random_floats(x->nelements(), 5)).ok());
  ASSERT_TRUE(write_from_f32(*sinks, {0.5f, -1.0f, 3.0f}).ok());
  ASSERT_TRUE(write_from_f32(*b, random_floats(b->nelements(), 6)).ok());
  const std::vector<uint8_t> wbytes = random_encoded(DType::q4_0, experts->nelements(), 7);
  ASSERT_TRUE(client_buf->set(*experts, wbytes.data(), 0, wbytes.size()).ok());
  const std::vector<int32_t> chosen{4, 0, 2, 2, 9, 1, 3, 4};  // 9: not an expert
  ASSERT_TRUE(client_buf->set(*ids, chosen.data(), 0, 32).ok());
  auto server_buf = dev.allocate(client_buf->size()).value();
  std::memcpy(server_buf->host_base(), client_buf->host_base(), client_buf->size());

  WireWriter wire;
  ASSERT_TRUE(encode_graph(wire, g, [&](const Buffer* buf) -> uint64_t { return buf == client_buf ? 7 : 0; }).ok());
  WireReader r(wire.bytes());
  auto decoded = decode_graph(r, [&](uint64_t handle) -> StatusOr<Buffer*> {
    if (handle == 7) return server_buf.get();
    return not_found("not issued");
  });
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  const auto decoded_of = [&](const Tensor* t) -> const Tensor* {
    for (const Tensor* d : decoded->graph.leafs()) {
      if (d->offset == t->offset && d->ne == t->ne && d->type == t->type) return d;
    }
    return nullptr;
  };
  const Tensor* dprobs = nullptr;
  const Tensor* dmoe = nullptr;
  for (const Tensor* n : decoded->graph.nodes()) (n->op == Op::soft_max ? dprobs : dmoe) = n;
  ASSERT_NE(dprobs, nullptr);
  ASSERT_NE(dmoe, nullptr);
  EXPECT_EQ(dprobs->src[0], decoded_of(x));
  EXPECT_EQ(dprobs->src[1], nullptr);
  EXPECT_EQ(dprobs->src[2], decoded_of(sinks));
  EXPECT_NE(dprobs->src[2], nullptr);
  EXPECT_EQ(dmoe->src[0], decoded_of(experts));
  EXPECT_EQ(dmoe->src[1], decoded_of(b));
  EXPECT_EQ(dmoe->src[2], decoded_of(ids));

  auto stream = dev.create_stream().value();
  ASSERT_TRUE(stream->compute(g).ok());
  const Status s = stream->compute(decoded->graph);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(std::memcmp(client_buf->host_base(), server_buf->host_base(), client_buf->size()), 0);
}

// A source the graph does not contain (computed by an earlier graph) is sent
// as a leaf: the server reads its bytes and does not compute it again.
TEST(GraphCodec, SourcesOutsideTheGraphAreSentAsLeaves) {
  CpuDevice dev(CpuDeviceOptions{.threads = 1});
  Context ctx;
  Tensor* a = input(ctx, DType::f32, {8});
  Tensor* earlier = ctx.silu(a);
  Tensor* sum = ctx.add(a, a);
  Graph g = Graph::build({sum});
  GraphAllocator alloc(dev);
  ASSERT_TRUE(alloc.allocate(g).ok());
  auto other = dev.allocate(64).value();
  ASSERT_TRUE(other->place(*earlier, 0).ok());
  sum->src[1] = earlier;  // now reads a tensor the graph never visited

  WireWriter wire;
  const auto handle_of = [&](const Buffer* b) -> uint64_t { return b == other.get() ? 2 : 1; };
  ASSERT_TRUE(encode_graph(wire, g, handle_of).ok());
  WireReader r(wire.bytes());
  auto decoded = decode_graph(r, [&](uint64_t h) -> StatusOr<Buffer*> { return h == 2 ? other.get() : alloc.buffer(); });
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  ASSERT_EQ(decoded->graph.leafs().size(), 2u);
  ASSERT_EQ(decoded->graph.nodes().size(), 1u);
  EXPECT_EQ(decoded->graph.leafs()[1]->op, Op::none);
  EXPECT_EQ(decoded->graph.nodes()[0]->src[1], decoded->graph.leafs()[1]);
}

TEST(GraphCodec, EncodeRefusesUnplacedTensorsAndBuffersWithoutHandles) {
  CpuDevice dev(CpuDeviceOptions{.threads = 1});
  Context ctx;
  Graph g = Graph::build({ctx.silu(input(ctx, DType::f32, {8}))});
  WireWriter wire;
  EXPECT_TRUE(names(encode_graph(wire, g, [](const Buffer*) -> uint64_t { return 1; }), "not placed"));
  GraphAllocator alloc(dev);
  ASSERT_TRUE(alloc.allocate(g).ok());
  const Status s = encode_graph(wire, g, [](const Buffer*) -> uint64_t { return 0; });
  EXPECT_TRUE(names(s, "no handle")) << s.to_string();
  EXPECT_EQ(wire.size(), 0u) << "nothing written on failure";
}

// ---- hand-written encodings ----------------------------------------------------------

// Tensors are WireTensor (rpc_test_util.h), all in the buffer of handle 1.

// A dense tensor of a plain type of element size `es`.
WireTensor dense(uint32_t type, uint64_t es, std::array<int64_t, 4> ne, uint64_t offset) {
  WireTensor t;
  t.type = type;
  t.ne = ne;
  t.nb[0] = es;
  for (int i = 1; i < 4; ++i) t.nb[i] = t.nb[i - 1] * static_cast<uint64_t>(ne[i - 1]);
  t.handle = 1;
  t.offset = offset;
  return t;
}
WireTensor f32(std::array<int64_t, 4> ne, uint64_t offset) { return dense(0, 4, ne, offset); }

uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<uint8_t> encode_list(const std::vector<WireTensor>& ts, std::optional<uint32_t> count = {}) {
  WireWriter w;
  w.u32(count.value_or(static_cast<uint32_t>(ts.size())));
  for (const WireTensor& t : ts) t.write(w);
  return w.bytes();
}

class GraphCodecHostile : public ::testing::Test {
 protected:
  void SetUp() override { buf_ = dev_.allocate(kBufferSize).value(); }

  StatusOr<DecodedGraph> decode(const std::vector<uint8_t>& bytes) {
    WireReader r(bytes);
    return decode_graph(r, [this](uint64_t handle) -> StatusOr<Buffer*> {
      if (handle == 1) return buf_.get();
      return not_found("no buffer of this connection has it");
    });
  }
  // Passes when decoding fails with `code` and a message naming every needle.
  ::testing::AssertionResult refused(const std::vector<WireTensor>& ts, std::initializer_list<std::string> needles,
                                     StatusCode code = StatusCode::invalid_argument) {
    return refused_bytes(encode_list(ts), needles, code);
  }
  ::testing::AssertionResult refused_bytes(const std::vector<uint8_t>& bytes,
                                           std::initializer_list<std::string> needles,
                                           StatusCode code = StatusCode::invalid_argument) {
    auto d = decode(bytes);
    if (d.ok()) return ::testing::AssertionFailure() << "was accepted";
    const Status s = d.status();
    if (s.code() != code) return ::testing::AssertionFailure() << "wrong code: " << s.to_string();
    for (const std::string& n : needles) {
      if (!names(s, n))
        return ::testing::AssertionFailure() << "\"" << s.message() << "\" does not name \"" << n << "\"";
    }
    return ::testing::AssertionSuccess();
  }

  // a + b, each f32 [8, 2]: a valid graph the hostile cases bend.
  static std::vector<WireTensor> valid_add() {
    WireTensor node = f32({8, 2, 1, 1}, 128);
    node.op = static_cast<uint32_t>(Op::add);
    node.src = {0, 1, -1};
    node.flags = kFlagOutput;
    return {f32({8, 2, 1, 1}, 0), f32({8, 2, 1, 1}, 64), node};
  }

  static constexpr uint64_t kBufferSize = 4096;
  CpuDevice dev_{CpuDeviceOptions{.threads = 1}};
  std::unique_ptr<Buffer> buf_;
};

TEST_F(GraphCodecHostile, TheValidGraphDecodesAndComputes) {
  auto d = decode(encode_list(valid_add()));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  ASSERT_EQ(d->graph.leafs().size(), 2u);
  ASSERT_EQ(d->graph.nodes().size(), 1u);
  const Tensor* sum = d->graph.nodes()[0];
  EXPECT_EQ(sum->data, static_cast<char*>(buf_->host_base()) + 128);
  EXPECT_EQ(sum->flags, kFlagOutput);
  std::vector<float> ones(16, 1.0f);
  ASSERT_TRUE(buf_->set(*d->graph.leafs()[0], ones.data(), 0, 64).ok());
  ASSERT_TRUE(buf_->set(*d->graph.leafs()[1], ones.data(), 0, 64).ok());
  auto stream = dev_.create_stream().value();
  ASSERT_TRUE(stream->compute(d->graph).ok());
  EXPECT_EQ(read_as_f32(*sum).value(), std::vector<float>(16, 2.0f));
}

TEST_F(GraphCodecHostile, EncoderWritesTheDocumentedLayout) {
  // The encoder's bytes for a + b equal the bytes written from the document.
  Context ctx;
  Tensor* a = ctx.new_tensor(DType::f32, {8, 2});
  Tensor* b = ctx.new_tensor(DType::f32, {8, 2});
  Tensor* sum = ctx.add(a, b);
  Graph g = Graph::build({sum});
  ASSERT_TRUE(buf_->place(*a, 0).ok());
  ASSERT_TRUE(buf_->place(*b, 64).ok());
  ASSERT_TRUE(buf_->place(*sum, 128).ok());
  WireWriter w;
  ASSERT_TRUE(encode_graph(w, g, [](const Buffer*) -> uint64_t { return 1; }).ok());
  EXPECT_EQ(w.bytes(), encode_list(valid_add()));
  EXPECT_EQ(w.size(), 4u + 3 * 136) << "136 bytes a tensor";
}

TEST_F(GraphCodecHostile, RefusesUnknownTypes) {
  auto ts = valid_add();
  ts[0].type = 16;  // iq2_xxs: a GGUF type tensorpc does not run
  EXPECT_TRUE(refused(ts, {"graph tensor 0", "type iq2_xxs (id 16) is not one tensorpc runs"}));
  ts[0].type = 4;  // retired from GGUF
  EXPECT_TRUE(refused(ts, {"graph tensor 0", "type id 4 (unknown)"}));
}

TEST_F(GraphCodecHostile, RefusesNegativeDims) {
  auto ts = valid_add();
  ts[1].ne[2] = -1;
  EXPECT_TRUE(refused(ts, {"graph tensor 1", "ne[2] is negative"}));
}

TEST_F(GraphCodecHostile, RefusesStridesThatOverflow) {
  auto ts = valid_add();
  ts[0].ne[1] = 8;
  ts[0].nb[1] = 1ull << 62;
  EXPECT_TRUE(refused(ts, {"graph tensor 0", "overflows"}));
}

TEST_F(GraphCodecHostile, RefusesRangesPastTheBufferEnd) {
  auto ts = valid_add();
  ts[2].offset = kBufferSize - 32;  // 64 bytes from here run 32 past the end
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "past the end", "4096"}));
  ts[2].offset = ~0ull - 3;  // offset + span wraps
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "past the end"}));
}

TEST_F(GraphCodecHostile, RefusesMoreElementsThanTheBufferCouldHold) {
  // A zero stride makes 2^20 rows span 32 bytes; the node computing from it
  // would be empty, but mul_mat's scratch would hold every row of b.
  auto ts = valid_add();
  ts[0].ne[1] = 1 << 20;
  ts[0].nb[1] = 0;
  EXPECT_TRUE(refused(ts, {"graph tensor 0", "more elements than its buffer of 4096 bytes"}));
  ts[0].ne[1] = 2;
  ts[0].nb[1] = 0;  // a modest broadcast is fine
  EXPECT_TRUE(decode(encode_list(ts)).ok());
}

TEST_F(GraphCodecHostile, RefusesEmptyTensorsWhoseRowsReachPastTheBuffer) {
  // No elements per row, but a kernel still forms each row's address.
  auto ts = valid_add();
  ts[0].ne = {0, 2, 1, 1};
  ts[0].nb = {4, ~uint64_t{0} - 31, 0, 0};
  EXPECT_TRUE(refused({ts[0]}, {"graph tensor 0", "past the end"}));
}

TEST_F(GraphCodecHostile, RefusesMisalignedOffsets) {
  auto ts = valid_add();
  ts[1].offset = 66;
  EXPECT_TRUE(refused(ts, {"graph tensor 1", "offset 66"}));
}

TEST_F(GraphCodecHostile, RefusesQuantizedBlocksAtOddOffsets) {
  // A q8_0 block starts with its fp16 scale, which kernels load as a uint16.
  WireTensor q;
  q.handle = 1;
  q.type = 8;
  q.ne = {64, 1, 1, 1};
  q.nb = {34, 68, 68, 68};
  q.offset = 35;
  EXPECT_TRUE(refused({q}, {"graph tensor 0", "offset 35", "q8_0 alignment 2"}));
  q.offset = 34;
  EXPECT_TRUE(decode(encode_list({q})).ok());
}

TEST_F(GraphCodecHostile, RefusesUnknownHandles) {
  auto ts = valid_add();
  ts[1].handle = 7;
  EXPECT_TRUE(refused(ts, {"graph tensor 1", "handle 7", "no buffer of this connection"}, StatusCode::not_found));
}

TEST_F(GraphCodecHostile, RefusesSourcesThatAreNotEarlier) {
  auto ts = valid_add();
  ts[2].src[1] = 2;  // itself
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "source 1 is index 2"}));
  ts[2].src[1] = 5;  // past the list
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "source 1 is index 5"}));
  ts[2].src[1] = -2;
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "source 1 is index -2"}));
}

TEST_F(GraphCodecHostile, RefusesSourcesOnALeaf) {
  auto ts = valid_add();
  ts[1].src[0] = 0;
  EXPECT_TRUE(refused(ts, {"graph tensor 1", "leaf"}));
}

TEST_F(GraphCodecHostile, RefusesUnknownOps) {
  auto ts = valid_add();
  ts[2].op = 99;
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "unknown op 99"}));
}

TEST_F(GraphCodecHostile, RefusesShapeRuleViolations) {
  // mul_mat of a [8, 2] and b [4, 2]: K differs.
  WireTensor mm = f32({2, 2, 1, 1}, 256);
  mm.op = static_cast<uint32_t>(Op::mul_mat);
  mm.src = {0, 1, -1};
  EXPECT_TRUE(refused({f32({8, 2, 1, 1}, 0), f32({4, 2, 1, 1}, 64), mm}, {"graph tensor 2", "mul_mat", "K"}));
}

TEST_F(GraphCodecHostile, RefusesNodesThatDoNotMatchTheirSources) {
  auto ts = valid_add();
  ts[2] = f32({8, 3, 1, 1}, 128);
  ts[2].op = static_cast<uint32_t>(Op::add);
  ts[2].src = {0, 1, -1};
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "add", "[8, 3, 1, 1]"}));
}

TEST_F(GraphCodecHostile, RefusesAWrongRopeMode) {
  WireTensor x = f32({8, 2, 4, 1}, 0);
  WireTensor pos = dense(26, 4, {4, 1, 1, 1}, 256);
  WireTensor rope = f32({8, 2, 4, 1}, 512);
  rope.op = static_cast<uint32_t>(Op::rope);
  rope.src = {0, 1, -1};
  rope.params = {8, 1, static_cast<int32_t>(f32_bits(10000.0f)), static_cast<int32_t>(f32_bits(1.0f))};
  EXPECT_TRUE(refused({x, pos, rope}, {"graph tensor 2", "rope", "mode 1"}));
  rope.params[1] = kRopeNeox;
  EXPECT_TRUE(decode(encode_list({x, pos, rope})).ok()) << "mode 2 (neox) is fine";
}

// A YaRN rope with frequency factors (src[2]) decodes and computes; each
// malformed variant of it is refused, naming the tensor and the problem.
TEST_F(GraphCodecHostile, RefusesMalformedYarnRopesAndFrequencyFactors) {
  const auto bits = [](float f) { return static_cast<int32_t>(f32_bits(f)); };
  const WireTensor x = f32({8, 2, 4, 1}, 0);
  const WireTensor pos = dense(26, 4, {4, 1, 1, 1}, 256);
  const WireTensor factors = f32({4, 1, 1, 1}, 320);
  WireTensor rope = f32({8, 2, 4, 1}, 512);
  rope.op = static_cast<uint32_t>(Op::rope);
  rope.src = {0, 1, 2};
  rope.params = {8, kRopeNeox | kRopeYarnBit, bits(10000.0f), bits(0.25f), bits(1.0f), bits(1.0f), bits(0.0f),
                 bits(7.0f)};
  auto d = decode(encode_list({x, pos, factors, rope}));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_TRUE(dev_.create_stream().value()->compute(d->graph).ok());

  const float nan = std::numeric_limits<float>::quiet_NaN();
  WireTensor bad = rope;
  bad.params[6] = bits(nan);
  EXPECT_TRUE(refused({x, pos, factors, bad}, {"graph tensor 3", "rope", "corr_low nan"}));
  bad = rope;
  bad.params[7] = bits(8.0f);
  EXPECT_TRUE(refused({x, pos, factors, bad}, {"graph tensor 3", "rope", "corr_high 8"}));
  bad = rope;
  bad.params[0] = 7;
  EXPECT_TRUE(refused({x, pos, factors, bad}, {"graph tensor 3", "rope", "n_dims 7"}));
  bad = rope;
  bad.params[2] = bits(nan);
  EXPECT_TRUE(refused({x, pos, factors, bad}, {"graph tensor 3", "rope", "freq_base nan"}));
  bad = rope;
  bad.params[4] = bits(-1.0f);
  EXPECT_TRUE(refused({x, pos, factors, bad}, {"graph tensor 3", "rope", "ext_factor"}));
  bad = rope;
  bad.params[1] = kRopeNeox;  // YaRN slots set, the bit not
  EXPECT_TRUE(refused({x, pos, factors, bad}, {"graph tensor 3", "rope", "YaRN bit"}));
  EXPECT_TRUE(refused({x, pos, f32({3, 1, 1, 1}, 320), rope}, {"graph tensor 3", "rope", "freq_factors"}));
  EXPECT_TRUE(refused({x, pos, dense(26, 4, {4, 1, 1, 1}, 320), rope}, {"graph tensor 3", "rope", "freq_factors"}));
}

TEST_F(GraphCodecHostile, RefusesDestinationsThatOverlapThemselves) {
  auto ts = valid_add();
  ts[2].nb = {4, 0, 32, 32};  // both rows on the same bytes
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "overlap"}));
}

TEST_F(GraphCodecHostile, RefusesNodesThatWriteTheBytesOfTheirSources) {
  auto ts = valid_add();
  ts[2].offset = 0;  // in place over a
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "add writes bytes that its source 0 (graph tensor 0) reads"}));
  ts[2].offset = 96;  // half over b
  EXPECT_TRUE(refused(ts, {"graph tensor 2", "source 1"}));
  // A cpy from a view of the bytes it writes: overlapping memcpy.
  WireTensor cpy = f32({8, 2, 1, 1}, 32);
  cpy.op = static_cast<uint32_t>(Op::cpy);
  cpy.src = {0, -1, -1};
  EXPECT_TRUE(refused({f32({8, 2, 1, 1}, 0), cpy}, {"graph tensor 1", "cpy writes bytes"}));
}

TEST_F(GraphCodecHostile, RefusesMoreTensorsThanTheLimit) {
  EXPECT_TRUE(refused_bytes(encode_list({}, rpc::kMaxGraphTensors + 1), {"n_tensors", "65537"}));
  EXPECT_TRUE(refused_bytes(encode_list({}, rpc::kMaxGraphTensors), {"65536 tensors need"}))
      << "a count within the limit but beyond the bytes sent";
}

TEST_F(GraphCodecHostile, RefusesEveryTruncation) {
  const std::vector<uint8_t> bytes = encode_list(valid_add());
  for (size_t len = 0; len < bytes.size(); ++len) {
    const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(len));
    auto d = decode(prefix);
    EXPECT_FALSE(d.ok()) << "a prefix of " << len << " bytes decoded";
    if (!d.ok()) {
      EXPECT_EQ(d.status().code(), StatusCode::invalid_argument) << len;
    }
  }
  EXPECT_TRUE(decode(bytes).ok());
}

TEST_F(GraphCodecHostile, AnEmptyGraphIsFine) {
  auto d = decode(encode_list({}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->graph.nodes().size(), 0u);
}

}  // namespace
}  // namespace tensorpc::test
