// Helpers shared by the tests: the byte formats of the tensor types decoded
// independently of the library, seeded random data, a tolerance compare that
// names the first mismatch, a runner that computes a graph on a device, and
// plain double-precision reference implementations of the ops.
//
// The references read the spec in include/tensorpc/op.h and context.h, not the
// library's code: a test compares the library against them, so they must stay
// simple enough to check by eye.
#pragma once

#include <gtest/gtest.h>
#include <time.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/device.h"
#include "tensorpc/graph.h"
#include "tensorpc/graph_allocator.h"
#include "tensorpc/status.h"
#include "tensorpc/tensor.h"

namespace tensorpc::test {

// Whether `part` occurs in `text` (error messages, server output).
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- type formats (GGUF layouts, decoded here without the library) ---------

// Seconds of CPU the process's other threads used while this one slept:
// how a test sees threads spinning where they should sleep.
inline double others_cpu_while_sleeping(std::chrono::milliseconds sleep) {
  const auto seconds = [](clockid_t clock) {
    timespec t{};
    clock_gettime(clock, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double process = seconds(CLOCK_PROCESS_CPUTIME_ID), mine = seconds(CLOCK_THREAD_CPUTIME_ID);
  std::this_thread::sleep_for(sleep);
  return (seconds(CLOCK_PROCESS_CPUTIME_ID) - process) - (seconds(CLOCK_THREAD_CPUTIME_ID) - mine);
}

inline float fp16_to_f32(uint16_t h) {
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return (h & 0x8000) ? -v : v;
}

// Round to nearest even, as IEEE conversion does.
inline uint16_t f32_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) {  // subnormal: a multiple of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const auto mant = static_cast<uint32_t>(std::nearbyint((2 * m - 1) * 1024.0f));
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(e - 1 + 15) << 10) + mant);
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

inline constexpr int kQBlock = 32;
inline constexpr size_t kQ8Bytes = 2 + 32;  // fp16 d, int8 q[32]; value = d*q
inline constexpr size_t kQ4Bytes = 2 + 16;  // fp16 d, byte j: value j low nibble, j+16 high
inline constexpr size_t kMXFP4Bytes = 1 + 16;  // E8M0 e, then nibbles as q4_0

// The OCP E2M1 value of a 4-bit code: bit 3 the sign, bits 1-2 the exponent (bias 1; 0 means
// subnormal, 0.5 * mantissa), bit 0 the mantissa.
inline double e2m1_value(int code) {
  const int exp = (code >> 1) & 3, man = code & 1;
  const double mag = exp == 0 ? 0.5 * man : std::ldexp(1.0 + 0.5 * man, exp - 1);
  return code & 8 ? -mag : mag;
}

// Value j (0..31) of an mxfp4 block: E2M1(code) * 2^(e - 127), rounded once to float.
inline float mxfp4_value(const uint8_t* block, int j) {
  const uint8_t byte = block[1 + j % 16];
  const int code = j < 16 ? byte & 0xf : byte >> 4;
  return static_cast<float>(e2m1_value(code) * std::ldexp(1.0, block[0] - 127));
}

// Decodes n contiguous values of `type` (n a multiple of the block size).
inline std::vector<float> decode(DType type, const void* bytes, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  std::vector<float> out(static_cast<size_t>(n));
  auto u16 = [](const uint8_t* q) { return static_cast<uint16_t>(q[0] | (q[1] << 8)); };
  for (int64_t i = 0; i < n; ++i) {
    switch (type) {
      case DType::f32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case DType::f16: out[i] = fp16_to_f32(u16(p + 2 * i)); break;
      case DType::bf16: out[i] = bf16_to_f32(u16(p + 2 * i)); break;
      case DType::i32: {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<float>(v);
        break;
      }
      case DType::q8_0: {
        const uint8_t* blk = p + (i / kQBlock) * kQ8Bytes;
        out[i] = fp16_to_f32(u16(blk)) * static_cast<float>(static_cast<int8_t>(blk[2 + i % kQBlock]));
        break;
      }
      case DType::q4_0: {
        const uint8_t* blk = p + (i / kQBlock) * kQ4Bytes;
        const int j = static_cast<int>(i % kQBlock);
        const int nib = j < 16 ? (blk[2 + j] & 0xf) : (blk[2 + j - 16] >> 4);
        out[i] = fp16_to_f32(u16(blk)) * static_cast<float>(nib - 8);
        break;
      }
      case DType::mxfp4: out[i] = mxfp4_value(p + (i / kQBlock) * kMXFP4Bytes, static_cast<int>(i % kQBlock)); break;
      default:
        // The other block formats: the library's dequantizer, which
        // tests/core/quant_formats_test.cpp pins against references of its own.
        traits(type).to_float(bytes, out.data(), n);
        return out;
    }
  }
  return out;
}

// ---- random data -------------------------------------------------------------

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Values in [lo, hi] with a random sign: safe divisors.
inline std::vector<float> random_away_from_zero(int64_t n, uint32_t seed, float lo = 0.5f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = neg(rng) ? -dist(rng) : dist(rng);
  return v;
}

inline std::vector<int32_t> random_ints(int64_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Where a block of `type` keeps its f16 scales (d, and dmin or m where it has one), as GGUF lays
// the blocks out; written here from the format, independently of src/core/quant.h.
inline std::vector<size_t> f16_scale_offsets(DType type) {
  switch (type) {
    case DType::q4_1:
    case DType::q5_1:
    case DType::q4_K:
    case DType::q5_K: return {0, 2};
    case DType::q4_0:
    case DType::q8_0:
    case DType::q5_0:
    case DType::iq4_nl:
    case DType::iq4_xs: return {0};
    case DType::q2_K: return {80, 82};
    case DType::q3_K: return {108};
    case DType::q6_K: return {208};
    default: throw std::invalid_argument(std::string("f16_scale_offsets: not a block format with f16 scales: ") + name_of(type));
  }
}

// The bytes of n random values of `type`, of magnitude about 1, built here
// (not by the library's quantizer) so that kernels are checked on bytes whose
// meaning the test alone defines.
inline std::vector<uint8_t> random_encoded(DType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<uint8_t> out;
  auto put16 = [&](uint16_t h) {
    out.push_back(static_cast<uint8_t>(h & 0xff));
    out.push_back(static_cast<uint8_t>(h >> 8));
  };
  switch (type) {
    case DType::f32:
      out.resize(static_cast<size_t>(n) * 4);
      for (int64_t i = 0; i < n; ++i) {
        const float f = unit(rng);
        std::memcpy(out.data() + 4 * i, &f, 4);
      }
      break;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) put16(f32_to_fp16(unit(rng)));
      break;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) put16(f32_to_bf16(unit(rng)));
      break;
    case DType::q8_0: {
      std::uniform_real_distribution<float> scale(0.002f, 0.012f);
      std::uniform_int_distribution<int> q(-127, 127);
      for (int64_t b = 0; b < n / kQBlock; ++b) {
        put16(f32_to_fp16(scale(rng)));
        for (int j = 0; j < kQBlock; ++j) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(q(rng))));
      }
      break;
    }
    case DType::q4_0: {
      std::uniform_real_distribution<float> scale(0.05f, 0.15f);
      std::uniform_int_distribution<int> byte(0, 255);
      std::bernoulli_distribution neg(0.5);
      for (int64_t b = 0; b < n / kQBlock; ++b) {
        const float d = scale(rng);
        put16(f32_to_fp16(neg(rng) ? -d : d));
        for (int j = 0; j < 16; ++j) out.push_back(static_cast<uint8_t>(byte(rng)));
      }
      break;
    }
    case DType::mxfp4: {
      // Every code; exponents near 2^-4 so values are of magnitude about 1.
      std::uniform_int_distribution<int> byte(0, 255), e(121, 125);
      for (int64_t b = 0; b < n / kQBlock; ++b) {
        out.push_back(static_cast<uint8_t>(e(rng)));
        for (int j = 0; j < 16; ++j) out.push_back(static_cast<uint8_t>(byte(rng)));
      }
      break;
    }
    case DType::i32:
      throw std::invalid_argument("random_encoded: i32 has no random encoding; use random_ints");
    case DType::q8_K:
      throw std::invalid_argument("random_encoded: q8_K is an activation format (its bsums depend on its quants)");
    default: {
      // The other block formats: every byte random (so every bit pattern of quants and packed
      // sub-block scales occurs), then each f16 scale field set to a sane value.
      const auto fields = f16_scale_offsets(type);
      const size_t bytes = block_bytes(type);
      std::uniform_int_distribution<int> byte(0, 255);
      std::uniform_real_distribution<float> scale(0.001f, 0.01f);
      std::bernoulli_distribution neg(0.5);
      for (int64_t b = 0; b < n / block_size(type); ++b) {
        const size_t start = out.size();
        for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(byte(rng)));
        for (size_t off : fields) {
          const float d = scale(rng);
          const uint16_t h = f32_to_fp16(neg(rng) ? -d : d);
          out[start + off] = static_cast<uint8_t>(h & 0xff);
          out[start + off + 1] = static_cast<uint8_t>(h >> 8);
        }
      }
    }
  }
  return out;
}

// ---- comparing -----------------------------------------------------------------

struct Tolerance {
  double rel = 0;
  double abs = 0;
};

// Per-type tolerances for results of element-wise math on values of that type.
inline Tolerance tolerance_for(DType type) {
  switch (type) {
    case DType::f16: return {1e-3, 1e-4};
    case DType::bf16: return {1e-2, 1e-3};
    default: return {1e-5, 1e-6};
  }
}

// Passes when every got[i] is within abs[i] of want[i]; an infinity must be
// matched exactly. On failure names the first mismatch and counts them all.
inline ::testing::AssertionResult all_near_each(const std::vector<float>& got, const std::vector<double>& want,
                                                const std::vector<double>& abs_tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "got " << got.size() << " values, want " << want.size();
  }
  size_t bad = 0;
  size_t first = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double w = want[i];
    bool ok;
    if (std::isinf(w) || std::isinf(g)) {
      ok = g == w;
    } else {
      const double err = std::fabs(g - w);
      ok = err <= abs_tol[i];  // false for NaN
      if (!ok && !std::isnan(err)) worst = std::max(worst, err);
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " values differ; first at index " << first
                                       << ": got " << got[first] << ", want " << want[first] << " (tolerance "
                                       << abs_tol[first] << "); largest finite error " << worst;
}

inline ::testing::AssertionResult all_near(const std::vector<float>& got, const std::vector<double>& want,
                                           Tolerance tol) {
  std::vector<double> abs_tol(want.size());
  for (size_t i = 0; i < want.size(); ++i) abs_tol[i] = tol.abs + tol.rel * std::fabs(want[i]);
  return all_near_each(got, want, abs_tol);
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// ---- devices under test ------------------------------------------------------

struct CpuConfig {
  int threads;
  bool portable_kernels;
};

// Every op test runs on each of these: 1 and 2 threads, portable and best kernels.
inline const std::vector<CpuConfig>& all_cpu_configs() {
  static const std::vector<CpuConfig> configs = {{1, false}, {2, false}, {1, true}, {2, true}};
  return configs;
}

inline std::string config_name(const CpuConfig& c) {
  return "threads" + std::to_string(c.threads) + (c.portable_kernels ? "_portable" : "_best");
}
inline void PrintTo(const CpuConfig& c, std::ostream* os) { *os << config_name(c); }

inline std::unique_ptr<CpuDevice> make_device(const CpuConfig& c) {
  // Every thread on every graph, however small, so the threaded kernels are what is tested.
  return std::make_unique<CpuDevice>(CpuDeviceOptions{
      .threads = c.threads, .portable_kernels = c.portable_kernels, .min_work_per_node_for_threads = 0});
}

inline void check(const Status& s, const std::string& what) {
  if (!s.ok()) throw std::runtime_error(what + ": " + s.to_string());
}

// Marks t as an input (set by the caller before compute) and returns it.
inline Tensor* input(Context& ctx, DType type, std::initializer_list<int64_t> ne, std::string name = {}) {
  Tensor* t = ctx.new_tensor(type, ne, std::move(name));
  t->flags |= kFlagInput;
  return t;
}

inline Tensor* input(Context& ctx, DType type, const std::array<int64_t, 4>& ne, std::string name = {}) {
  Tensor* t = ctx.new_tensor(type, ne.data(), 4, std::move(name));
  t->flags |= kFlagInput;
  return t;
}

// A graph placed on a device by a GraphAllocator: write inputs, compute, read.
// Failures throw, which fails the calling test with the status message.
class GraphRun {
 public:
  GraphRun(Device& dev, const std::vector<Tensor*>& outputs)
      : dev_(dev), graph_(Graph::build(outputs)), alloc_(dev) {
    check(alloc_.allocate(graph_), "GraphAllocator::allocate");
  }

  // Writes values through write_from_f32 and returns the values as stored
  // (rounded or quantized to t's type), decoded from t's bytes.
  std::vector<float> write(Tensor* t, const std::vector<float>& values) {
    check(write_from_f32(*t, values), "write_from_f32 " + t->name);
    return decode(t->type, raw(t).data(), t->nelements());
  }
  // Writes bytes as they are; returns their decoded values.
  std::vector<float> write_raw(Tensor* t, const std::vector<uint8_t>& bytes) {
    if (bytes.size() != t->nbytes()) throw std::runtime_error("write_raw: size mismatch");
    check(t->buffer->set(*t, bytes.data(), 0, bytes.size()), "Buffer::set");
    return decode(t->type, bytes.data(), t->nelements());
  }
  void write_i32(Tensor* t, const std::vector<int32_t>& values) {
    if (values.size() * 4 != t->nbytes()) throw std::runtime_error("write_i32: size mismatch");
    check(t->buffer->set(*t, values.data(), 0, t->nbytes()), "Buffer::set");
  }

  void compute() {
    auto stream = dev_.create_stream();
    check(stream.status(), "create_stream");
    check(stream.value()->compute(graph_), "Stream::compute");
  }

  std::vector<float> read(const Tensor* t) {
    auto v = read_as_f32(*t);
    check(v.status(), "read_as_f32");
    return std::move(v).value();
  }
  std::vector<uint8_t> raw(const Tensor* t) {
    std::vector<uint8_t> bytes(t->nbytes());
    check(t->buffer->get(*t, bytes.data(), 0, bytes.size()), "Buffer::get");
    return bytes;
  }
  std::vector<int32_t> read_i32(const Tensor* t) {
    std::vector<int32_t> v(static_cast<size_t>(t->nelements()));
    if (!t->is_contiguous() || v.size() * 4 != t->nbytes()) throw std::runtime_error("read_i32: not contiguous");
    check(t->buffer->get(*t, v.data(), 0, t->nbytes()), "Buffer::get");
    return v;
  }

  Graph& graph() { return graph_; }
  GraphAllocator& allocator() { return alloc_; }

 private:
  Device& dev_;
  Graph graph_;
  GraphAllocator alloc_;
};

// ---- reference implementations (double precision, loops over ne) ------------

using Shape = std::array<int64_t, 4>;

// Values in logical row-major order (ne[0] fastest).
struct HostTensor {
  Shape ne{1, 1, 1, 1};
  std::vector<double> v;

  HostTensor() = default;
  explicit HostTensor(Shape shape) : ne(shape), v(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3])) {}
  HostTensor(Shape shape, const std::vector<float>& values) : ne(shape), v(values.begin(), values.end()) {
    if (static_cast<int64_t>(v.size()) != ne[0] * ne[1] * ne[2] * ne[3]) {
      throw std::invalid_argument("HostTensor: values do not fit the shape");
    }
  }

  size_t index(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<size_t>(((i3 * ne[2] + i2) * ne[1] + i1) * ne[0] + i0);
  }
  double& operator()(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) { return v[index(i0, i1, i2, i3)]; }
  double operator()(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return v[index(i0, i1, i2, i3)];
  }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
};

inline Shape shape_of(const Tensor* t) { return {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}; }

#define TENSORPC_FOR_EACH_INDEX(ne, i0, i1, i2, i3)  \
  for (int64_t i3 = 0; i3 < (ne)[3]; ++i3)           \
    for (int64_t i2 = 0; i2 < (ne)[2]; ++i2)         \
      for (int64_t i1 = 0; i1 < (ne)[1]; ++i1)       \
        for (int64_t i0 = 0; i0 < (ne)[0]; ++i0)

namespace ref {

// a (op) b with each dim of b either 1 (broadcast) or equal to a's.
template <typename F>
HostTensor binary(const HostTensor& a, const HostTensor& b, F f) {
  HostTensor c(a.ne);
  TENSORPC_FOR_EACH_INDEX(a.ne, i0, i1, i2, i3) {
    c(i0, i1, i2, i3) = f(a(i0, i1, i2, i3), b(i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]));
  }
  return c;
}

template <typename F>
HostTensor unary(const HostTensor& a, F f) {
  HostTensor c(a.ne);
  for (size_t i = 0; i < a.v.size(); ++i) c.v[i] = f(a.v[i]);
  return c;
}

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }
inline double gelu(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// a [K,M,A2,A3] x b [K,N,B2,B3] -> [M,N,B2,B3]; b's matrix (i2,i3) uses a's
// (i2 / (B2/A2), i3 / (B3/A3)).
inline HostTensor mul_mat(const HostTensor& a, const HostTensor& b) {
  const int64_t K = a.ne[0];
  HostTensor c({a.ne[1], b.ne[1], b.ne[2], b.ne[3]});
  const int64_t r2 = b.ne[2] / a.ne[2];
  const int64_t r3 = b.ne[3] / a.ne[3];
  for (int64_t i3 = 0; i3 < b.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < b.ne[2]; ++i2)
      for (int64_t n = 0; n < b.ne[1]; ++n)
        for (int64_t m = 0; m < a.ne[1]; ++m) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += a(k, m, i2 / r2, i3 / r3) * b(k, n, i2, i3);
          c(m, n, i2, i3) = s;
        }
  return c;
}

// Per output, the scale against which a dot product's rounding is judged:
// sum over k of |a_k| * |b_k|.
inline HostTensor mul_mat_abs(const HostTensor& a, const HostTensor& b) {
  HostTensor aa = unary(a, [](double x) { return std::fabs(x); });
  HostTensor bb = unary(b, [](double x) { return std::fabs(x); });
  return mul_mat(aa, bb);
}

inline HostTensor rms_norm(const HostTensor& x, double eps) {
  HostTensor y(x.ne);
  for (int64_t r = 0; r < x.rows(); ++r) {
    const size_t base = static_cast<size_t>(r * x.ne[0]);
    double ss = 0;
    for (int64_t i = 0; i < x.ne[0]; ++i) ss += x.v[base + i] * x.v[base + i];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.ne[0]) + eps);
    for (int64_t i = 0; i < x.ne[0]; ++i) y.v[base + i] = x.v[base + i] * s;
  }
  return y;
}

inline HostTensor norm(const HostTensor& x, double eps) {
  HostTensor y(x.ne);
  const auto n = static_cast<double>(x.ne[0]);
  for (int64_t r = 0; r < x.rows(); ++r) {
    const size_t base = static_cast<size_t>(r * x.ne[0]);
    double mean = 0;
    for (int64_t i = 0; i < x.ne[0]; ++i) mean += x.v[base + i];
    mean /= n;
    double var = 0;
    for (int64_t i = 0; i < x.ne[0]; ++i) var += (x.v[base + i] - mean) * (x.v[base + i] - mean);
    var /= n;
    for (int64_t i = 0; i < x.ne[0]; ++i) y.v[base + i] = (x.v[base + i] - mean) / std::sqrt(var + eps);
  }
  return y;
}

// x [D,H,T,1], pos[T]. Pair p (i0 = 2p < n_dims) turns by
// pos * freq_scale * freq_base^(-2p/n_dims). Normal mode pairs (2p, 2p+1), neox
// mode pairs (p, p + n_dims/2); dims from n_dims on are copied.
inline HostTensor rope(const HostTensor& x, const std::vector<int32_t>& pos, int n_dims, int mode, double freq_base,
                       double freq_scale) {
  HostTensor y = x;
  for (int64_t t = 0; t < x.ne[2]; ++t)
    for (int64_t h = 0; h < x.ne[1]; ++h)
      for (int p = 0; p < n_dims / 2; ++p) {
        const double theta = pos[t] * freq_scale * std::pow(freq_base, -2.0 * p / n_dims);
        const int64_t j0 = mode == kRopeNeox ? p : 2 * p;
        const int64_t j1 = mode == kRopeNeox ? p + n_dims / 2 : 2 * p + 1;
        const double x0 = x(j0, h, t);
        const double x1 = x(j1, h, t);
        y(j0, h, t) = x0 * std::cos(theta) - x1 * std::sin(theta);
        y(j1, h, t) = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
  return y;
}

// softmax(x * scale + mask) per row; mask row i1 serves rows (i1, any i2, i3).
// A row whose every value is -inf becomes all zeros.
inline HostTensor soft_max(const HostTensor& x, const HostTensor* mask, double scale) {
  HostTensor y(x.ne);
  for (int64_t i3 = 0; i3 < x.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < x.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < x.ne[1]; ++i1) {
        std::vector<double> v(static_cast<size_t>(x.ne[0]));
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t i0 = 0; i0 < x.ne[0]; ++i0) {
          v[i0] = x(i0, i1, i2, i3) * scale + (mask ? (*mask)(i0, i1) : 0.0);
          mx = std::max(mx, v[i0]);
        }
        if (std::isinf(mx) && mx < 0) continue;  // fully masked: zeros
        double sum = 0;
        for (auto& e : v) sum += (e = std::exp(e - mx));
        for (int64_t i0 = 0; i0 < x.ne[0]; ++i0) y(i0, i1, i2, i3) = v[i0] / sum;
      }
  return y;
}

// A causal mask [n_kv, n_q]: -inf where i0 > n_past + i1, else 0.
inline HostTensor causal_mask(int64_t n_kv, int64_t n_q, int64_t n_past) {
  HostTensor m({n_kv, n_q, 1, 1});
  for (int64_t i1 = 0; i1 < n_q; ++i1)
    for (int64_t i0 = 0; i0 < n_kv; ++i0)
      m(i0, i1) = i0 > n_past + i1 ? -std::numeric_limits<double>::infinity() : 0.0;
  return m;
}

// The dims of x put in the order of axes: result dim axes[i] is x's dim i.
inline HostTensor permute(const HostTensor& x, std::array<int, 4> axes) {
  Shape ne{};
  for (int i = 0; i < 4; ++i) ne[axes[i]] = x.ne[i];
  HostTensor y(ne);
  TENSORPC_FOR_EACH_INDEX(x.ne, i0, i1, i2, i3) {
    std::array<int64_t, 4> j{};
    j[axes[0]] = i0;
    j[axes[1]] = i1;
    j[axes[2]] = i2;
    j[axes[3]] = i3;
    y(j[0], j[1], j[2], j[3]) = x(i0, i1, i2, i3);
  }
  return y;
}

inline HostTensor reshape(HostTensor x, Shape ne) {
  x.ne = ne;
  return x;
}

}  // namespace ref

inline std::vector<float> to_float(const HostTensor& t) { return {t.v.begin(), t.v.end()}; }

}  // namespace tensorpc::test

namespace tensorpc::test {

// Base of the op tests: a CpuDevice built from the CpuConfig parameter.
class CpuOpTest : public ::testing::TestWithParam<CpuConfig> {
 protected:
  void SetUp() override { dev_ = make_device(GetParam()); }
  CpuDevice& dev() { return *dev_; }

 private:
  std::unique_ptr<CpuDevice> dev_;
};

struct CpuConfigName {
  std::string operator()(const ::testing::TestParamInfo<CpuConfig>& info) const { return config_name(info.param); }
};

// The YaRN RoPE parameters the rope tests share: 64 rotated dims, frequencies
// scaled by a quarter over an original context of 4096, full extrapolation mix.
inline RopeParams yarn_rope_params(int mode) {
  RopeParams p;
  p.n_dims = 64;
  p.mode = mode;
  p.freq_scale = 0.25f;
  p.n_ctx_orig = 4096;
  p.ext_factor = 1.0f;
  return p;
}

inline std::string shape_str(const Shape& ne) {
  std::ostringstream os;
  os << "[" << ne[0] << ", " << ne[1] << ", " << ne[2] << ", " << ne[3] << "]";
  return os.str();
}

}  // namespace tensorpc::test
