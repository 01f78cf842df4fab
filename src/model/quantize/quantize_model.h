// Quantizing a GGUF model: a new file with the same metadata and tensors,
// each tensor converted to the type its quantization mix gives it
// (quantize_mix.h).
//
// plan_quantization() decides every tensor's type from the file alone;
// quantize_gguf() writes the new file: every key copied in order (with
// `general.file_type` set to the mix's llama ftype and
// `general.quantization_version` to 2, as llama.cpp writes them), the input's
// alignment, and each tensor dequantized to f32 and quantized again, its rows
// spread over `threads` threads. A tensor whose type does not change is
// copied byte for byte. Tensors are converted one at a time as the file is
// written, so memory holds one tensor's result, not the model's; the file
// goes to a temporary name that is renamed over `out_path` only when
// complete (AtomicFileWriter), so a failure leaves nothing behind.
//
// Quiet: progress goes to the caller's callback.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/quantize/quantize_mix.h"
#include "tensorpc/status.h"

namespace tensorpc {

// What happens to one tensor.
struct TensorQuantization {
  std::string name;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  DType from = DType::f32;  // in the input
  TensorTypeChoice to{DType::f32, DType::f32};
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
};

// The model facts the mix rules use, from the `<arch>.block_count` and head
// count keys, or from the tensor names when they are absent.
QuantModelShape quant_model_shape(const GgufFile& file);

// Every tensor of `file` in file order, with the type `mix` gives it.
std::vector<TensorQuantization> plan_quantization(const GgufFile& file, QuantMix mix);

struct QuantizeOptions {
  int threads = 1;  // rows of one tensor quantized in parallel
  // Called after each tensor is converted, in file order: its index and plan.
  std::function<void(size_t, const TensorQuantization&)> on_tensor = {};
};

struct QuantizeSummary {
  std::vector<TensorQuantization> tensors;
  uint64_t file_bytes_in = 0;
  uint64_t file_bytes_out = 0;
};

// Writes `file` quantized with `mix` to `out_path`.
StatusOr<QuantizeSummary> quantize_gguf(const GgufFile& file, const std::string& out_path, QuantMix mix,
                                        const QuantizeOptions& options = {});

// `rows` rows of `row_length` elements of type `from` at `src` converted to
// `to` at `dst`, each through f32, the rows split over `threads` threads.
// row_length is a multiple of both types' block sizes.
void convert_rows(DType from, const uint8_t* src, DType to, uint8_t* dst, int64_t row_length, int64_t rows,
                  int threads);

}  // namespace tensorpc
