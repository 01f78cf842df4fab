// The digests of a model file's tensors, in memory and in a store file (see
// weight_digests.h).
#include "model/gguf/weight_digests.h"

#include <array>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace tensorpc {
namespace {

constexpr std::string_view kMagic = "tensorpc weight digests 1";
// A store holds a line of about 90 bytes per tensor; a model has hundreds
// of tensors, a few thousand at most. Anything larger is not ours.
constexpr uint64_t kMaxStoreBytes = uint64_t{4} << 20;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Splits off the next '\n'-terminated line; false when none is left.
bool next_line(std::string_view& rest, std::string_view& line) {
  const size_t end = rest.find('\n');
  if (end == std::string_view::npos) return false;
  line = rest.substr(0, end);
  rest.remove_prefix(end + 1);
  return true;
}

// The next space-separated field of `line`.
std::string_view next_field(std::string_view& line) {
  const size_t end = line.find(' ');
  const std::string_view field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end + 1);
  return field;
}

// A decimal number that is the whole field.
template <typename T>
bool parse_number(std::string_view field, T& out) {
  if (field.empty()) return false;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  return ec == std::errc() && end == field.data() + field.size();
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool parse_hex(std::string_view field, std::array<uint8_t, 32>& out) {
  if (field.size() != 2 * out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_value(field[2 * i]), lo = hex_value(field[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::string identity_fields(const FileIdentity& id) {
  return std::to_string(id.device) + " " + std::to_string(id.inode) + " " + std::to_string(id.size) + " " +
         std::to_string(id.mtime_ns);
}

}  // namespace

WeightDigests WeightDigests::open(const std::string& dir, const FileIdentity& identity) {
  WeightDigests d;
  d.identity_ = identity;
  if (dir.empty()) return d;
  d.dir_ = dir;
  d.path_ = dir + "/" + file_name(identity);
  // Missing (the first load), unreadable or too large: nothing known yet.
  auto bytes = read_small_file(d.path_, kMaxStoreBytes);
  if (bytes.ok() && !d.parse(bytes.value())) d.digests_.clear();
  return d;
}

std::string WeightDigests::default_dir() {
  const std::string chosen = env("TENSORPC_DIGEST_DIR");
  if (!chosen.empty()) return chosen == "off" ? std::string() : chosen;
  // XDG: a relative XDG_CACHE_HOME is invalid and ignored.
  const std::string xdg = env("XDG_CACHE_HOME");
  if (!xdg.empty() && xdg.front() == '/') return xdg + "/tensorpc/digests";
  const std::string home = env("HOME");
  if (!home.empty()) return home + "/.cache/tensorpc/digests";
  return std::string();
}

std::string WeightDigests::file_name(const FileIdentity& id) {
  return std::to_string(id.device) + "-" + std::to_string(id.inode) + "-" + std::to_string(id.size) + "-" +
         std::to_string(id.mtime_ns) + ".digests";
}

ContentDigest& WeightDigests::slot(uint64_t offset, uint64_t size) { return digests_[{offset, size}]; }

size_t WeightDigests::known() const {
  size_t n = 0;
  for (const auto& [key, digest] : digests_) n += digest.known ? 1 : 0;
  return n;
}

Status WeightDigests::save() {
  if (path_.empty()) return Status();
  Status s = make_directories(dir_, 0700);
  if (s.ok()) {
    auto writer = AtomicFileWriter::create(path_);
    if (writer.ok()) {
      const std::string text = encode();
      s = writer.value()->write({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
      if (s.ok()) s = writer.value()->commit();
    } else {
      s = writer.status();
    }
  }
  if (!s.ok()) {
    path_.clear();  // in memory only from now on
    save_failure_ = s.with_context("saving weight digests");
    return save_failure_;
  }
  return Status();
}

bool WeightDigests::parse(std::span<const uint8_t> bytes) {
  std::string_view rest(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::string_view line;
  if (!next_line(rest, line) || line != kMagic) return false;
  if (!next_line(rest, line) || line != "file " + identity_fields(identity_)) return false;
  uint64_t entries = 0;
  while (next_line(rest, line)) {
    if (line.starts_with("end ")) {
      uint64_t count = 0;
      return parse_number(line.substr(4), count) && count == entries && rest.empty();
    }
    uint64_t offset = 0, size = 0;
    ContentDigest digest{.known = true};
    if (!parse_number(next_field(line), offset) || !parse_number(next_field(line), size) ||
        !parse_hex(next_field(line), digest.sha256) || !line.empty()) {
      return false;
    }
    // The bytes lie in the file (a digest of bytes elsewhere names nothing).
    if (offset > identity_.size || size > identity_.size - offset) return false;
    digests_[{offset, size}] = digest;
    ++entries;
  }
  return false;  // no end line: truncated
}

std::string WeightDigests::encode() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = std::string(kMagic) + "\nfile " + identity_fields(identity_) + "\n";
  uint64_t entries = 0;
  for (const auto& [key, digest] : digests_) {
    if (!digest.known) continue;
    out += std::to_string(key.first) + " " + std::to_string(key.second) + " ";
    for (uint8_t b : digest.sha256) {
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
    out += '\n';
    ++entries;
  }
  out += "end " + std::to_string(entries) + "\n";
  return out;
}

}  // namespace tensorpc
