"""A small GGUF v3 writer and reader: just what export_gguf.py and sample.py need.

File layout (all little-endian):
    "GGUF", u32 version = 3, u64 tensor count, u64 key-value count
    key-values: string key, u32 value type, value (arrays: u32 element type, u64 count, elements)
    tensor infos: string name, u32 n_dims, u64 ne[n_dims] (ne[0] varies fastest), u32 ggml type,
                  u64 offset of the data from the start of the data section
    padding to general.alignment, then the tensor data, each tensor at an aligned offset
A string is a u64 byte length then UTF-8 bytes, without a terminator.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3

# Value types of key-value pairs.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR_FORMATS = {UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
                   FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d"}

# ggml tensor types used here.
GGML_F32, GGML_F16 = 0, 1
_TENSOR_DTYPES = {GGML_F32: np.float32, GGML_F16: np.float16}


def _pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _pack_value(vtype, value):
    if vtype == STRING:
        return _pack_string(value)
    return struct.pack(_SCALAR_FORMATS[vtype], value)


class Writer:
    def __init__(self, alignment=32):
        self.alignment = alignment
        self.kv = []       # (key, type, value, element type for arrays)
        self.tensors = []  # (name, ggml type, numpy array in its on-disk dtype)

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value, None))

    def add_array(self, key, elem_type, values):
        self.kv.append((key, ARRAY, list(values), elem_type))

    def add_tensor(self, name, array, ggml_type):
        """array: numpy array in torch/C order, shape [..., ne1, ne0]; stored as ne = reversed."""
        self.tensors.append((name, ggml_type, np.ascontiguousarray(array, dtype=_TENSOR_DTYPES[ggml_type])))

    def write(self, path):
        out = bytearray(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv)))
        for key, vtype, value, elem_type in self.kv:
            out += _pack_string(key) + struct.pack("<I", vtype)
            if vtype == ARRAY:
                out += struct.pack("<IQ", elem_type, len(value))
                for v in value:
                    out += _pack_value(elem_type, v)
            else:
                out += _pack_value(vtype, value)
        offset = 0
        for name, ggml_type, arr in self.tensors:
            ne = arr.shape[::-1]
            out += _pack_string(name) + struct.pack("<I", len(ne))
            out += struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", ggml_type, offset)
            offset = _align(offset + arr.nbytes, self.alignment)
        out += bytes(_align(len(out), self.alignment) - len(out))
        data_start = len(out)
        for _, _, arr in self.tensors:
            out += bytes(_align(len(out) - data_start, self.alignment) - (len(out) - data_start))
            out += arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        with open(path, "wb") as f:
            f.write(out)


def _align(n, a):
    return (n + a - 1) // a * a


class Reader:
    """Reads the whole file: .kv maps key to value, .tensors maps name to a numpy array of shape
    reversed(ne) (so a GGUF [in, out] matrix comes back as [out, in], the torch Linear layout)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = struct.unpack("<IQQ", self._take(20))
        if version != GGUF_VERSION:
            raise ValueError(f"{path}: GGUF version {version}, expected {GGUF_VERSION}")
        self.kv = {}
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = struct.unpack("<I", self._take(4))
            self.kv[key] = self._value(vtype)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = struct.unpack("<I", self._take(4))
            ne = struct.unpack(f"<{n_dims}Q", self._take(8 * n_dims))
            ggml_type, offset = struct.unpack("<IQ", self._take(12))
            infos.append((name, ne, ggml_type, offset))
        alignment = self.kv.get("general.alignment", 32)
        data_start = _align(self.pos, alignment)
        self.tensors = {}
        for name, ne, ggml_type, offset in infos:
            if ggml_type not in _TENSOR_DTYPES:
                raise ValueError(f"tensor {name}: ggml type {ggml_type} not supported here")
            dtype = np.dtype(_TENSOR_DTYPES[ggml_type]).newbyteorder("<")
            count = int(np.prod(ne))
            arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=data_start + offset)
            self.tensors[name] = arr.reshape(tuple(reversed(ne)))

    def _take(self, n):
        b = self.buf[self.pos: self.pos + n]
        self.pos += n
        return b

    def _string(self):
        (n,) = struct.unpack("<Q", self._take(8))
        return self._take(n).decode("utf-8")

    def _value(self, vtype):
        if vtype == STRING:
            return self._string()
        if vtype == ARRAY:
            elem_type, count = struct.unpack("<IQ", self._take(12))
            return [self._value(elem_type) for _ in range(count)]
        fmt = _SCALAR_FORMATS[vtype]
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]
