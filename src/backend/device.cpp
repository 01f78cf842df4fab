// The parts of the device interface that every device shares.
#include "tensorpc/device.h"

#include <cstring>
#include <string>

namespace tensorpc {

const char* to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::gpu: return "gpu";
    case DeviceKind::remote: return "remote";
  }
  return "unknown";
}

Status Buffer::place(Tensor& t, uint64_t offset) {
  if (t.view_src != nullptr) return invalid_argument("place: " + describe(t) + " is a view; use place_view");
  const uint64_t align = device().alignment();
  if (offset % align != 0) {
    return invalid_argument("place: offset " + std::to_string(offset) + " is not a multiple of the alignment " +
                            std::to_string(align) + " of " + device().name());
  }
  const uint64_t bytes = t.nbytes();
  if (offset > size() || bytes > size() - offset) {
    return invalid_argument("place: " + describe(t) + " (" + std::to_string(bytes) + " bytes) at offset " +
                            std::to_string(offset) + " does not fit a buffer of " + std::to_string(size()) +
                            " bytes");
  }
  t.buffer = this;
  t.offset = offset;
  t.data = host_base() ? static_cast<char*>(host_base()) + offset : nullptr;
  return Status();
}

Status Buffer::place_view(Tensor& view) {
  Tensor* src = view.view_src;
  if (src == nullptr) return invalid_argument("place_view: " + describe(view) + " is not a view");
  if (src->buffer == nullptr) return invalid_argument("place_view: the source of " + describe(view) + " is not placed");
  view.buffer = src->buffer;
  view.offset = src->offset + view.view_offset;
  view.data = src->data ? static_cast<char*>(src->data) + view.view_offset : nullptr;
  return Status();
}

Status Buffer::check_range(const Tensor& t, uint64_t offset, uint64_t size, const char* what) const {
  if (t.buffer != this) return invalid_argument(std::string(what) + ": " + describe(t) + " is not in this buffer");
  const uint64_t span = t.nbytes();
  if (offset > span || size > span - offset) {
    return invalid_argument(std::string(what) + ": bytes [" + std::to_string(offset) + ", +" + std::to_string(size) +
                            ") lie outside " + describe(t) + " (" + std::to_string(span) + " bytes)");
  }
  if (t.offset > this->size() || span > this->size() - t.offset) {
    return invalid_argument(std::string(what) + ": " + describe(t) + " extends past the end of its buffer");
  }
  return Status();
}

Status Buffer::set_tensors(std::span<const TensorBytes> writes) {
  for (const TensorBytes& w : writes) TENSORPC_RETURN_IF_ERROR(set(*w.tensor, w.data, 0, w.tensor->nbytes()));
  return Status();
}

Status Stream::compute(Graph& g) {
  // Synchronized even when issuing failed, so that failure (which a stream
  // also keeps for its next synchronize) is reported once, here.
  const Status issued = compute_async(g);
  const Status synced = synchronize();
  return issued.ok() ? synced : issued;
}

StatusOr<std::vector<float>> read_as_f32(const Tensor& t) {
  if (t.buffer == nullptr) return invalid_argument("read_as_f32: " + describe(t) + " is not placed");
  std::vector<char> bytes(t.nbytes());
  TENSORPC_RETURN_IF_ERROR(t.buffer->get(t, bytes.data(), 0, bytes.size()));

  const DTypeTraits& tr = traits(t.type);
  if (tr.is_quantized && !t.rows_are_contiguous()) {
    return invalid_argument("read_as_f32: quantized rows of " + describe(t) + " are not contiguous");
  }
  std::vector<float> out;
  out.reserve(static_cast<size_t>(t.nelements()));
  std::vector<float> row(static_cast<size_t>(t.ne[0]));
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) {
        const char* r = bytes.data() + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
        if (tr.is_quantized) {
          tr.to_float(r, row.data(), t.ne[0]);
        } else {
          for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) {
            const char* e = r + i0 * t.nb[0];
            if (t.type == DType::i32) {
              int32_t v;
              std::memcpy(&v, e, 4);
              row[i0] = static_cast<float>(v);
            } else {
              tr.to_float(e, &row[i0], 1);
            }
          }
        }
        out.insert(out.end(), row.begin(), row.end());
      }
    }
  }
  return out;
}

Status write_from_f32(Tensor& t, const std::vector<float>& values) {
  if (t.buffer == nullptr) return invalid_argument("write_from_f32: " + describe(t) + " is not placed");
  if (!t.is_contiguous()) return invalid_argument("write_from_f32: " + describe(t) + " is not contiguous");
  if (static_cast<int64_t>(values.size()) != t.nelements()) {
    return invalid_argument("write_from_f32: " + std::to_string(values.size()) + " values for " + describe(t));
  }
  std::vector<char> bytes(t.nbytes());
  if (t.type == DType::i32) {
    for (size_t i = 0; i < values.size(); ++i) {
      const auto v = static_cast<int32_t>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  } else {
    traits(t.type).from_float(values.data(), bytes.data(), t.nelements());
  }
  return t.buffer->set(t, bytes.data(), 0, bytes.size());
}

Status PlanRunner::synchronize_and_read(const Tensor& t, void* dst, const std::function<void()>& meanwhile) {
  if (meanwhile) meanwhile();
  TENSORPC_RETURN_IF_ERROR(synchronize());
  if (t.buffer == nullptr) return invalid_argument("read after plans: " + describe(t) + " is not placed");
  return t.buffer->get(t, dst, 0, t.nbytes());
}

}  // namespace tensorpc
