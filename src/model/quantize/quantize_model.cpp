// Writing a quantized copy of a GGUF model (see quantize_model.h).
#include "model/quantize/quantize_model.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "model/gguf/gguf_writer.h"

namespace tensorpc {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION: the block layouts of today

// The rows [begin, end) of convert_rows, on one thread.
void convert_range(DType from, const uint8_t* src, DType to, uint8_t* dst, int64_t row_length, int64_t begin,
                   int64_t end) {
  const uint64_t in_row = row_bytes(from, row_length), out_row = row_bytes(to, row_length);
  std::vector<float> row(static_cast<size_t>(row_length));
  // f32 rows (4-aligned in any GGUF) are read where they lie, not copied first.
  const bool direct = from == DType::f32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0;
  for (int64_t r = begin; r < end; ++r) {
    const uint8_t* in = src + static_cast<uint64_t>(r) * in_row;
    const float* values = direct ? reinterpret_cast<const float*>(in) : row.data();
    if (!direct) traits(from).to_float(in, row.data(), row_length);
    traits(to).from_float(values, dst + static_cast<uint64_t>(r) * out_row, row_length);
  }
}

}  // namespace

void convert_rows(DType from, const uint8_t* src, DType to, uint8_t* dst, int64_t row_length, int64_t rows,
                  int threads) {
  const int64_t n = std::clamp<int64_t>(threads, 1, std::max<int64_t>(rows, 1));
  if (n == 1) return convert_range(from, src, to, dst, row_length, 0, rows);
  std::vector<std::jthread> workers;
  const int64_t per = (rows + n - 1) / n;
  for (int64_t begin = per; begin < rows; begin += per) {
    workers.emplace_back(convert_range, from, src, to, dst, row_length, begin, std::min(rows, begin + per));
  }
  convert_range(from, src, to, dst, row_length, 0, std::min(rows, per));
}

QuantModelShape quant_model_shape(const GgufFile& file) {
  // A key that is absent or of an unexpected type (a per-layer array) counts as absent.
  const auto or_else = [](auto result, auto fallback) { return result.ok() ? result.value() : fallback; };
  QuantModelShape shape;
  const std::string arch = or_else(file.get_string("general.architecture"), std::string("llama"));
  std::set<int64_t> layers;  // the blocks named, for a file without block_count
  for (const GgufTensorInfo& t : file.tensors()) {
    if (const int64_t layer = tensor_layer(t.name); layer >= 0) layers.insert(layer);
  }
  shape.n_layer = or_else(file.get_u32(arch + ".block_count"), static_cast<uint32_t>(layers.size()));
  const uint32_t heads = or_else(file.get_u32(arch + ".attention.head_count"), 1u);
  const uint32_t kv_heads = or_else(file.get_u32(arch + ".attention.head_count_kv"), heads);
  shape.n_gqa = kv_heads > 0 && heads >= kv_heads ? heads / kv_heads : 1;
  shape.has_output = file.tensor("output.weight") != nullptr;
  shape.n_expert = or_else(file.get_u32(arch + ".expert_count"), 0u);
  return shape;
}

std::vector<TensorQuantization> plan_quantization(const GgufFile& file, QuantMix mix) {
  const QuantModelShape shape = quant_model_shape(file);
  std::vector<TensorQuantization> plan;
  for (const GgufTensorInfo& t : file.tensors()) {
    TensorQuantization q;
    q.name = t.name;
    q.ne = t.ne;
    q.from = t.type;
    q.to = choose_tensor_type(mix, shape, t.name, t.n_dims, t.ne[0], t.type);
    q.bytes_in = t.nbytes;
    q.bytes_out = row_bytes(q.to.type, t.ne[0]) * static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    plan.push_back(std::move(q));
  }
  return plan;
}

StatusOr<QuantizeSummary> quantize_gguf(const GgufFile& file, const std::string& out_path, QuantMix mix,
                                        const QuantizeOptions& options) {
  QuantizeSummary summary;
  summary.tensors = plan_quantization(file, mix);
  summary.file_bytes_in = file.size();
  if (file.alignment() > UINT32_MAX) {
    return invalid_argument("the alignment " + std::to_string(file.alignment()) + " does not fit a GGUF u32");
  }
  GgufWriter w(static_cast<uint32_t>(file.alignment()));
  if (file.has("general.alignment")) w.always_write_alignment();

  // Every key in order; the two that say how the tensors are stored get the new values.
  const uint32_t file_type = mix_info(mix).file_type;
  bool has_file_type = false, has_version = false;
  for (const GgufKeyInfo& k : file.keys()) {
    if (k.name == "general.alignment") continue;  // written from the writer's alignment
    if (k.name == "general.file_type") {
      TENSORPC_RETURN_IF_ERROR(w.add_u32(k.name, file_type));
      has_file_type = true;
    } else if (k.name == "general.quantization_version") {
      TENSORPC_RETURN_IF_ERROR(w.add_u32(k.name, kQuantizationVersion));
      has_version = true;
    } else {
      TENSORPC_ASSIGN_OR_RETURN(GgufValue v, file.value(k.name));
      TENSORPC_RETURN_IF_ERROR(w.add(k.name, std::move(v)));
    }
  }
  if (!has_file_type) TENSORPC_RETURN_IF_ERROR(w.add_u32("general.file_type", file_type));
  if (!has_version) TENSORPC_RETURN_IF_ERROR(w.add_u32("general.quantization_version", kQuantizationVersion));

  const int threads = std::max(1, options.threads);
  std::vector<GgufWriter::TensorProducer> make(summary.tensors.size());
  for (size_t i = 0; i < summary.tensors.size(); ++i) {
    const GgufTensorInfo& in = file.tensors()[i];
    const TensorQuantization& q = summary.tensors[i];
    make[i] = [&in, &q, i, threads, &options]() -> StatusOr<std::vector<uint8_t>> {
      std::vector<uint8_t> out(q.bytes_out);
      if (q.to.type == in.type) {
        std::copy(in.bytes.begin(), in.bytes.end(), out.begin());
      } else if (in.ne[0] > 0) {
        convert_rows(in.type, in.bytes.data(), q.to.type, out.data(), in.ne[0], in.nelements() / in.ne[0], threads);
      }
      if (options.on_tensor) options.on_tensor(i, q);
      return out;
    };
  }
  // The writer asks for the tensors in order; each one's bytes are made while the one before
  // is being written. (A future of std::async joins its task when it is replaced or destroyed,
  // so a write that fails, or a tensor asked out of order, waits for the one in the making.)
  std::future<StatusOr<std::vector<uint8_t>>> ahead;
  size_t ahead_index = 0;
  for (size_t i = 0; i < make.size(); ++i) {
    const GgufTensorInfo& in = file.tensors()[i];
    auto produce = [&make, &ahead, &ahead_index, i]() -> StatusOr<std::vector<uint8_t>> {
      StatusOr<std::vector<uint8_t>> bytes = ahead.valid() && ahead_index == i ? ahead.get() : make[i]();
      if (i + 1 < make.size()) {
        ahead = std::async(std::launch::async, make[i + 1]);
        ahead_index = i + 1;
      }
      return bytes;
    };
    const std::span<const int64_t> ne(in.ne.data(), static_cast<size_t>(in.n_dims));
    TENSORPC_RETURN_IF_ERROR(w.add_tensor_producer(in.name, summary.tensors[i].to.type, ne, produce));
  }
  TENSORPC_RETURN_IF_ERROR(w.write(out_path));
  std::error_code ec;
  summary.file_bytes_out = std::filesystem::file_size(out_path, ec);
  return summary;
}

}  // namespace tensorpc
