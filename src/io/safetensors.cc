#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/text.h"

namespace mxrl {
namespace {

using nlohmann::json;

// The reference implementation's limit; it keeps a hostile header from
// making us allocate gigabytes of JSON.
constexpr uint64_t kMaxHeaderSize = 100'000'000;

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1}, {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::I32, "I32", 4},         {DType::I64, "I64", 8},
};

const DTypeInfo& info(DType d) {
  for (const auto& i : kDTypes)
    if (i.dtype == d) return i;
  fail("invalid DType value {}", static_cast<int>(d));
}

// Messages quote header contents, which a hostile file can make huge; cut
// them short.
std::string cut(std::string s, size_t limit = 200) {
  if (s.size() > limit) s = s.substr(0, limit) + "...";
  return s;
}

// A JSON value for messages.
std::string brief(const json& v) { return cut(v.dump(), 60); }

// 'name' for messages, with control characters escaped so every error stays
// on one line.
std::string show(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 200)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out + (s.size() > 200 ? "...'" : "'");
}

// Byte size of a tensor, or nullopt if numel * dtype size does not fit in an
// int64 (shape entries must already be non-negative).
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, DType dtype) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return n;
}

// The value of a non-negative JSON integer ("-0" included), else nullopt.
std::optional<uint64_t> as_uint(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<uint64_t>();
  return std::nullopt;
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Parses the header JSON. nlohmann keeps one of several equal keys silently,
// so a parser callback tracks the keys of every open object and remembers
// the first duplicate.
json parse_header(std::string_view text, const std::string& label) {
  std::vector<std::set<std::string>> open_objects;
  std::string entry;      // the current top-level key, for context
  std::string duplicate;  // first problem found, reported after parsing
  json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end: open_objects.pop_back(); break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (open_objects.size() == 1) entry = key;
        if (!open_objects.back().insert(key).second && duplicate.empty()) {
          duplicate = open_objects.size() == 1
                          ? fmt::format("duplicate key {} in the header", show(key))
                          : fmt::format("duplicate key {} in the entry for {}", show(key), show(entry));
        }
        break;
      }
      default: break;
    }
    return true;
  };
  // nlohmann stops at a NUL byte as if the input ended there; in JSON text a
  // raw NUL is never valid.
  if (auto nul = text.find('\0'); nul != std::string_view::npos) {
    fail("{}: header is not valid JSON: NUL byte at offset {}", label, nul);
  }
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", label, cut(e.what(), 300));
  }
  if (!j.is_object()) fail("{}: header is not a JSON object (it is {})", label, j.type_name());
  if (!duplicate.empty()) fail("{}: {}", label, duplicate);
  // Like the reference implementation, reject leading whitespace or a BOM
  // (which nlohmann skips); trailing spaces are the usual padding.
  if (text[0] != '{') fail("{}: header does not start with '{{'", label);
  return j;
}

struct Entry {
  TensorView view;
  uint64_t begin, end;
};

// Validates one header entry against a data region of `data_size` bytes.
Entry parse_entry(const std::string& name, const json& v, std::span<const std::byte> data, const std::string& label) {
  std::string where = fmt::format("{}: tensor {}", label, show(name));
  if (!v.is_object()) fail("{}: entry is not a JSON object (it is {})", where, v.type_name());
  for (const auto& [key, _] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") fail("{}: unexpected key {}", where, show(key));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) fail("{}: missing key '{}'", where, key);
  }

  Entry e;
  e.view.name = name;
  const json& dt = v.at("dtype");
  if (!dt.is_string()) fail("{}: 'dtype' is not a string (it is {})", where, dt.type_name());
  auto dtype = dtype_from_name(dt.get_ref<const std::string&>());
  if (!dtype) fail("{}: unknown or unsupported dtype {}", where, show(dt.get_ref<const std::string&>()));
  e.view.dtype = *dtype;

  const json& shape = v.at("shape");
  if (!shape.is_array()) fail("{}: 'shape' is not an array (it is {})", where, shape.type_name());
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& d = shape[i];
    auto u = as_uint(d);
    if (d.is_number_integer() && !u) fail("{}: shape entry {} is negative ({})", where, i, brief(d));
    if (!u || *u > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail("{}: shape entry {} is not a non-negative 64-bit integer ({})", where, i, brief(d));
    }
    e.view.shape.push_back(static_cast<int64_t>(*u));
  }
  auto nbytes = byte_size(e.view.shape, e.view.dtype);
  if (!nbytes) {
    fail("{}: shape {} of {} is too large (its byte size overflows 64 bits)", where, shape_str(e.view.shape),
         dtype_name(e.view.dtype));
  }

  const json& off = v.at("data_offsets");
  std::optional<uint64_t> begin, end;
  if (off.is_array() && off.size() == 2) begin = as_uint(off[0]), end = as_uint(off[1]);
  if (!begin || !end) fail("{}: data_offsets {} is not two non-negative integers [begin, end]", where, brief(off));
  e.begin = *begin;
  e.end = *end;
  if (e.begin > e.end) fail("{}: data_offsets [{}, {}] have begin > end", where, e.begin, e.end);
  if (e.end > data.size()) {
    fail("{}: data_offsets [{}, {}] extend beyond the data region ({} bytes)", where, e.begin, e.end, data.size());
  }
  if (e.end - e.begin != *nbytes) {
    fail("{}: data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", where, e.begin, e.end, e.end - e.begin,
         shape_str(e.view.shape), dtype_name(e.view.dtype), *nbytes);
  }
  e.view.data = data.subspan(e.begin, e.end - e.begin);
  return e;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& label) {
  if (!v.is_object()) fail("{}: __metadata__ is not a JSON object (it is {})", label, v.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      fail("{}: __metadata__ value for key {} is not a string (it is {})", label, show(key), value.type_name());
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

}  // namespace

size_t dtype_size(DType d) { return info(d).size; }
const char* dtype_name(DType d) { return info(d).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kDTypes)
    if (name == i.name) return i.dtype;
  return std::nullopt;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------- File

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes, std::string label) {
  SafetensorsFile f;
  f.path_ = std::move(label);
  f.parse_bytes(bytes);
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  f.map_size_ = static_cast<size_t>(st.st_size);
  if (f.map_size_ > 0) {  // mmap rejects length 0; parse_bytes reports the short file
    void* p = ::mmap(nullptr, f.map_size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) fail("{}: cannot map: {}", path, std::strerror(errno));
    f.map_ = p;
  }
  // Note: like any mmap reader, this sees SIGBUS if another process truncates
  // the file while it is mapped.
  f.parse_bytes({static_cast<const std::byte*>(f.map_), f.map_size_});
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(map_, map_size_);
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

void SafetensorsFile::parse_bytes(std::span<const std::byte> bytes) {
  if (bytes.size() < 8) {
    fail("{}: file is too short ({} bytes) to hold the 8-byte header length", path_, bytes.size());
  }
  uint64_t n = read_le64(bytes.data());
  if (n > kMaxHeaderSize) fail("{}: header too large ({} bytes; the limit is {})", path_, n, kMaxHeaderSize);
  if (n > bytes.size() - 8) {
    fail("{}: header length {} exceeds the file size ({} bytes after the length prefix)", path_, n, bytes.size() - 8);
  }
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  std::span<const std::byte> data = bytes.subspan(8 + n);
  json header = parse_header(text, path_);

  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__")
      metadata_ = parse_metadata(value, path_);
    else
      entries.push_back(parse_entry(key, value, data, path_));
  }

  // The tensors must tile the data region exactly, in offset order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.view.name) < std::tie(b.begin, b.end, b.view.name);
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < cursor) {
      fail("{}: tensors {} and {} overlap (data_offsets [{}, {}] and [{}, {}])", path_, show(prev->view.name),
           show(e.view.name), prev->begin, prev->end, e.begin, e.end);
    }
    if (e.begin > cursor && !prev) {
      fail("{}: {} unused bytes before the first tensor {}", path_, e.begin, show(e.view.name));
    }
    if (e.begin > cursor) {
      fail("{}: gap of {} unused bytes between tensors {} and {}", path_, e.begin - cursor, show(prev->view.name),
           show(e.view.name));
    }
    cursor = e.end;
    prev = &e;
  }
  if (cursor != data.size()) {
    fail("{}: trailing garbage: {} bytes after the last tensor (the data region is {} bytes)", path_,
         data.size() - cursor, data.size());
  }

  tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    index_.emplace(e.view.name, tensors_.size());
    tensors_.push_back(std::move(e.view));
  }
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorView& SafetensorsFile::at(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  fail("{}: no tensor {}", path_, show(name));
}

// ---------------------------------------------------------------- Writer

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> data) {
  entries_.push_back({std::move(name), dtype, std::move(shape), std::move(data), {}, true});
}

void SafetensorsWriter::add_view(std::string name, DType dtype, std::vector<int64_t> shape,
                                 std::span<const std::byte> data) {
  entries_.push_back({std::move(name), dtype, std::move(shape), {}, data, false});
}

void SafetensorsWriter::set_metadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }

void SafetensorsWriter::write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    std::string where = fmt::format("{}: tensor {}", path, show(e.name));
    if (e.name == "__metadata__") fail("{}: the name is reserved for the metadata", where);
    if (header.contains(e.name)) fail("{}: duplicate tensor name", where);
    for (int64_t d : e.shape)
      if (d < 0) fail("{}: shape {} has a negative entry", where, shape_str(e.shape));
    auto nbytes = byte_size(e.shape, e.dtype);
    if (!nbytes) fail("{}: shape {} is too large (its byte size overflows 64 bits)", where, shape_str(e.shape));
    if (*nbytes != e.bytes().size()) {
      fail("{}: {} bytes of data but shape {} of {} needs {}", where, e.bytes().size(), shape_str(e.shape),
           dtype_name(e.dtype), *nbytes);
    }
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + *nbytes}}};
    offset += *nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // names and metadata must be valid UTF-8
    fail("{}: cannot encode the header: {}", path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data region starts 8-aligned

  std::byte len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::byte>(uint64_t(text.size()) >> (8 * i));
  AtomicFile out(path);
  out.write(len, sizeof(len));
  out.write(text.data(), text.size());
  for (const Entry& e : entries_) out.write(e.bytes().data(), e.bytes().size());
  out.commit();
}

}  // namespace mxrl
