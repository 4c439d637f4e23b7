#include "interop/mx_file.h"

#include <xxhash.h>

#include <cstring>
#include <set>
#include <vector>

#include "io/elem_dtype.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/text.h"

namespace mxrl {

namespace {
constexpr const char* kScaleSuffix = "_scale";

bool is_scale_name(const std::string& n) {
  const size_t k = std::strlen(kScaleSuffix);
  return n.size() > k && n.compare(n.size() - k, k, kScaleSuffix) == 0;
}

// rows x cols view of a tensor for the given axis, or an error naming it.
std::pair<int64_t, int64_t> matrix_view(const std::string& file, const std::string& name,
                                        const std::vector<int64_t>& shape, Axis axis) {
  if (axis == Axis::Row) {
    if (shape.empty() || shape.back() % kMxBlock != 0)
      fail("{}: tensor '{}' has shape {}: row blocks need the last dimension to be a multiple of {}", file, name,
           shape_str(shape), kMxBlock);
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    return {rows, shape.back()};
  }
  if (shape.size() != 2 || shape[0] % kMxBlock != 0)
    fail(
        "{}: tensor '{}' has shape {}: col blocks need a 2-D tensor whose first dimension is a "
        "multiple of {}",
        file, name, shape_str(shape), kMxBlock);
  return {shape[0], shape[1]};
}

std::vector<int64_t> scale_shape(const std::vector<int64_t>& shape, Axis axis) {
  std::vector<int64_t> s = shape;
  if (axis == Axis::Row)
    s.back() /= kMxBlock;
  else
    s[0] /= kMxBlock;
  return s;
}

std::map<std::string, std::string> user_metadata(const SafetensorsFile& f) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : f.metadata())
    if (k.rfind("mxrl.", 0) != 0) m[k] = v;
  return m;
}

std::string meta(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end()) fail("{}: metadata has no '{}'", f.path(), key);
  return it->second;
}
}  // namespace

uint64_t tensor_seed(uint64_t seed, const std::string& name) { return seed ^ XXH3_64bits(name.data(), name.size()); }

MxFileStats quantize_file(const std::string& in, const std::string& out, const MxConfig& cfg, const Exec& exec) {
  const SafetensorsFile f = SafetensorsFile::open(in);
  // Validate every tensor before doing any work.
  std::set<std::string> names;
  for (const auto& t : f.tensors()) names.insert(t.name);
  for (const auto& t : f.tensors()) {
    if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
      fail("{}: tensor '{}' has dtype {}; quantize takes F32, BF16 or F16", in, t.name, dtype_name(t.dtype));
    matrix_view(in, t.name, t.shape, cfg.axis);
    if (names.count(t.name + kScaleSuffix))
      fail("{}: tensor '{}' would collide with the scales of '{}'", in, t.name + kScaleSuffix, t.name);
  }
  SafetensorsWriter w;
  MxFileStats stats;
  for (const auto& t : f.tensors()) {
    const auto [rows, cols] = matrix_view(in, t.name, t.shape, cfg.axis);
    const InType it = t.dtype == DType::F32 ? InType::F32 : t.dtype == DType::BF16 ? InType::BF16 : InType::F16;
    std::vector<std::byte> codes(static_cast<size_t>(rows * cols));
    std::vector<std::byte> scales(static_cast<size_t>(mx_num_scales(rows, cols, cfg.axis)));
    MxConfig tc = cfg;
    tc.seed = tensor_seed(cfg.seed, t.name);
    mx_quantize(t.data.data(), it, rows, cols, tc, reinterpret_cast<uint8_t*>(codes.data()),
                reinterpret_cast<uint8_t*>(scales.data()), exec);
    stats.tensors++;
    stats.elements += rows * cols;
    stats.bytes_in += static_cast<int64_t>(t.data.size());
    stats.bytes_out += static_cast<int64_t>(codes.size() + scales.size());
    w.add(t.name, code_dtype(cfg.elem), t.shape, std::move(codes));
    w.add(t.name + kScaleSuffix, DType::F8_E8M0, scale_shape(t.shape, cfg.axis), std::move(scales));
  }
  auto m = user_metadata(f);
  m["mxrl.format"] = "mx";
  m["mxrl.block"] = std::to_string(kMxBlock);
  m["mxrl.elem"] = elem_traits(cfg.elem).name;
  m["mxrl.scale_rule"] = scale_rule_name(cfg.rule);
  m["mxrl.axis"] = axis_name(cfg.axis);
  m["mxrl.round"] = rounding_name(cfg.round);
  if (cfg.round == Rounding::Stochastic) m["mxrl.seed"] = std::to_string(cfg.seed);
  w.set_metadata(std::move(m));
  w.write(out);
  return stats;
}

MxFileStats dequantize_file(const std::string& in, const std::string& out, const Exec& exec) {
  const SafetensorsFile f = SafetensorsFile::open(in);
  if (!f.metadata().count("mxrl.format") || f.metadata().at("mxrl.format") != "mx")
    fail("{}: not an MX file written by mxrl quantize (metadata mxrl.format is not 'mx')", in);
  const auto elem = elem_from_name(meta(f, "mxrl.elem"));
  if (!elem) fail("{}: unknown element type '{}' in metadata", in, meta(f, "mxrl.elem"));
  const std::string axis_s = meta(f, "mxrl.axis");
  if (axis_s != "row" && axis_s != "col") fail("{}: unknown axis '{}' in metadata", in, axis_s);
  const Axis axis = axis_s == "row" ? Axis::Row : Axis::Col;
  const ElemTraits& tr = elem_traits(*elem);

  // Pair every code tensor with its scales; nothing may be left over.
  std::vector<std::pair<const TensorView*, const TensorView*>> pairs;
  for (const auto& t : f.tensors()) {
    if (is_scale_name(t.name)) {
      const std::string base = t.name.substr(0, t.name.size() - std::strlen(kScaleSuffix));
      if (!f.find(base)) fail("{}: scales '{}' have no tensor '{}'", in, t.name, base);
      continue;
    }
    const TensorView* s = f.find(t.name + kScaleSuffix);
    if (!s) fail("{}: tensor '{}' has no scales '{}{}'", in, t.name, t.name, kScaleSuffix);
    if (t.dtype != code_dtype(*elem))
      fail("{}: tensor '{}' has dtype {}, expected {} for {}", in, t.name, dtype_name(t.dtype),
           dtype_name(code_dtype(*elem)), tr.name);
    if (s->dtype != DType::F8_E8M0)
      fail("{}: scales '{}' have dtype {}, expected F8_E8M0", in, s->name, dtype_name(s->dtype));
    matrix_view(in, t.name, t.shape, axis);
    if (s->shape != scale_shape(t.shape, axis))
      fail("{}: scales '{}' have shape {}, expected {}", in, s->name, shape_str(s->shape),
           shape_str(scale_shape(t.shape, axis)));
    if (tr.bits < 8)
      for (std::byte b : t.data)
        if (static_cast<unsigned>(b) >> tr.bits)
          fail("{}: tensor '{}' holds byte 0x{:02X}, not a {}-bit {} code", in, t.name, static_cast<unsigned>(b),
               tr.bits, tr.name);
    pairs.emplace_back(&t, s);
  }
  SafetensorsWriter w;
  MxFileStats stats;
  for (auto [t, s] : pairs) {
    const auto [rows, cols] = matrix_view(in, t->name, t->shape, axis);
    std::vector<std::byte> y(static_cast<size_t>(rows * cols) * sizeof(float));
    mx_dequantize(reinterpret_cast<const uint8_t*>(t->data.data()), reinterpret_cast<const uint8_t*>(s->data.data()),
                  rows, cols, *elem, axis, reinterpret_cast<float*>(y.data()), exec);
    stats.tensors++;
    stats.elements += rows * cols;
    stats.bytes_in += static_cast<int64_t>(t->data.size() + s->data.size());
    stats.bytes_out += static_cast<int64_t>(y.size());
    w.add(t->name, DType::F32, t->shape, std::move(y));
  }
  w.set_metadata(user_metadata(f));
  w.write(out);
  return stats;
}

}  // namespace mxrl
