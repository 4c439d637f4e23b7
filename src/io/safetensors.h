// safetensors reader and writer (https://github.com/huggingface/safetensors).
//
// Layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON header, then
// the data region. The header maps each tensor name to
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
// (offsets relative to the start of the data region) and may hold
// "__metadata__": {str: str}. Tensors tile the data region exactly: no gaps,
// no overlaps, no trailing bytes.
//
// The reader validates everything and reports the first problem as one
// mxrl::Error "PATH: problem". The writer lays tensors out contiguously in the
// order they were added and pads the header with spaces so the data region
// starts at a multiple of 8 bytes, as the reference implementation does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mxrl {

enum class DType { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0, U8, I8, I32, I64 };

size_t dtype_size(DType);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
const char* dtype_name(DType);
std::optional<DType> dtype_from_name(std::string_view);

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;       // [] for a scalar
  std::span<const std::byte> data;  // points into the file's bytes; may be unaligned
  int64_t numel() const;
};

// A validated, read-only safetensors file. open() memory-maps the file
// (MAP_PRIVATE, PROT_READ); the views stay valid while the File lives,
// including across moves.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // Parses a buffer that the caller keeps alive as long as the File; errors
  // name `label` in place of a path.
  static SafetensorsFile parse(std::span<const std::byte> bytes, std::string label);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // In data-offset order (zero-size tensors at the same offset: by name).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(std::string_view name) const;
  // Throws mxrl::Error "PATH: no tensor 'NAME'".
  const TensorView& at(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  void parse_bytes(std::span<const std::byte> bytes);

  std::string path_;
  void* map_ = nullptr;  // the mapping, when open() made one
  size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
 public:
  // The writer owns the bytes.
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<std::byte> data);
  // The caller keeps `data` alive until write() returns.
  void add_view(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const std::byte> data);
  void set_metadata(std::map<std::string, std::string> metadata);

  // Validates every tensor (data size == numel * dtype_size, unique names,
  // no "__metadata__") before writing anything, then writes through
  // AtomicFile. Throws mxrl::Error "PATH: problem".
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<std::byte> owned;
    std::span<const std::byte> view;
    bool owns;
    std::span<const std::byte> bytes() const { return owns ? std::span<const std::byte>(owned) : view; }
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mxrl
