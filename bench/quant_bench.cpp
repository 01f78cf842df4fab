// Quality and speed of the reference quantizers: quantizes a 1024 x 2816 tensor of N(0, 1)
// values (fixed seed) with each weight format and prints, per format, the relative RMS error
// |dequant(quant(x)) - x| / |x|, the figure ggml's quantizer reaches without an importance
// matrix on the same kind of data, their ratio, and the quantize speed in MB/s of f32 input.
// Single-threaded, one pass per format (the reference quantizers are what is measured).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "tensorpc/dtype.h"

namespace {

using tensorpc::DType;

constexpr int64_t kRows = 1024;
constexpr int64_t kCols = 2816;  // 11 * 256: whole super-blocks, like a common FFN width

struct Format {
  DType type;
  double reference;  // ggml's relative RMS error on N(0, 1) data, no importance matrix
};

constexpr Format kFormats[] = {
    {DType::q8_0, 0.0054},   {DType::q6_K, 0.0178}, {DType::q5_K, 0.0361}, {DType::q5_1, 0.0378},
    {DType::q5_0, 0.0428},   {DType::q4_K, 0.0713}, {DType::q4_1, 0.0781}, {DType::iq4_nl, 0.0761},
    {DType::iq4_xs, 0.0768}, {DType::q4_0, 0.0858}, {DType::q3_K, 0.151},  {DType::q2_K, 0.296},
};

}  // namespace

int main() {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kRows * kCols));
  for (float& v : x) v = normal(rng);
  std::vector<float> back(x.size());

  std::printf("%-8s %10s %10s %7s %10s\n", "format", "rel_rms", "reference", "ratio", "MB/s");
  for (const Format& f : kFormats) {
    const tensorpc::DTypeTraits& t = tensorpc::traits(f.type);
    const size_t row_bytes = static_cast<size_t>(tensorpc::row_bytes(f.type, kCols));
    std::vector<uint8_t> q(row_bytes * kRows);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < kRows; ++r) t.from_float(x.data() + r * kCols, q.data() + r * row_bytes, kCols);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (int64_t r = 0; r < kRows; ++r) t.to_float(q.data() + r * row_bytes, back.data() + r * kCols, kCols);

    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err2 += (static_cast<double>(back[i]) - x[i]) * (static_cast<double>(back[i]) - x[i]);
      ref2 += static_cast<double>(x[i]) * x[i];
    }
    const double rel = std::sqrt(err2 / ref2);
    const double mb_per_s = static_cast<double>(x.size() * sizeof(float)) / seconds / 1e6;
    std::printf("%-8s %10.5f %10.4f %7.3f %10.1f\n", t.name, rel, f.reference, rel / f.reference, mb_per_s);
  }
  return 0;
}
