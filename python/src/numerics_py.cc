// mxrl.quantize / dequantize (MX), fp8_quantize / fp8_dequantize (the FP8
// grids of other engines), the element formats. The same kernels as the CLI
// (numerics/mx.h, numerics/fp8_grid.h): bit for bit what `mxrl quantize` writes.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <variant>

#include "arrays.h"
#include "interop/mx_file.h"
#include "numerics/fp8_grid.h"
#include "numerics/mx.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {

ElemType parse_elem(const std::string& s, bool fp8_only = false) {
  const auto e = elem_from_name(s);
  if (!e || (fp8_only && *e != ElemType::E4M3 && *e != ElemType::E5M2))
    throw nb::value_error(fp8_only ? fmt::format("elem '{}': expected e4m3 or e5m2", s).c_str()
                                   : fmt::format("elem '{}': expected one of e4m3, e5m2, e3m2, e2m3, e2m1", s).c_str());
  return *e;
}

ScaleRule parse_rule(const std::string& s) {
  if (s == "rceil") return ScaleRule::RCeil;
  if (s == "floor") return ScaleRule::Floor;
  throw nb::value_error(fmt::format("scale_rule '{}': expected rceil or floor", s).c_str());
}

// The 2-D view the kernels take: row blocks run along the last axis (rows =
// the product of the leading dimensions); col blocks along the first axis of
// a 2-D array.
struct View {
  Axis axis;
  int64_t rows, cols;
};

View mx_view(const std::vector<int64_t>& shape, int axis, const char* label) {
  const int nd = static_cast<int>(shape.size());
  if (nd == 0) throw nb::value_error(fmt::format("{}: a 0-d array has no axis to block", label).c_str());
  if (axis < -nd || axis >= nd)
    throw nb::value_error(
        fmt::format("{}: axis {} is out of range for shape {}", label, axis, shape_str(shape)).c_str());
  const int a = axis < 0 ? axis + nd : axis;
  if (a == nd - 1) {
    int64_t rows = 1;
    for (int i = 0; i < nd - 1; ++i) rows *= shape[i];
    if (shape[nd - 1] % kMxBlock != 0)
      throw nb::value_error(fmt::format("{}: tensor has shape {}: row blocks need the last dimension to be a multiple "
                                        "of {}",
                                        label, shape_str(shape), kMxBlock)
                                .c_str());
    return {Axis::Row, rows, shape[nd - 1]};
  }
  if (a != 0 || nd != 2)
    throw nb::value_error(fmt::format("{}: axis {} of shape {}: MX blocks run along the last axis (axis=-1) or, for "
                                      "a 2-D array, the first (axis=0)",
                                      label, axis, shape_str(shape))
                              .c_str());
  if (shape[0] % kMxBlock != 0)
    throw nb::value_error(fmt::format("{}: tensor has shape {}: col blocks need a 2-D tensor whose first dimension is "
                                      "a multiple of {}",
                                      label, shape_str(shape), kMxBlock)
                              .c_str());
  return {Axis::Col, shape[0], shape[1]};
}

std::vector<int64_t> scale_shape(const std::vector<int64_t>& shape, const View& v) {
  std::vector<int64_t> s = shape;
  if (v.axis == Axis::Row)
    s.back() /= kMxBlock;
  else
    s[0] /= kMxBlock;
  return s;
}

// A pool for one call: threads <= 0 means every core.
std::unique_ptr<ThreadPool> make_pool(int threads) {
  if (threads == 1) return nullptr;
  return std::make_unique<ThreadPool>(threads);
}

nb::tuple quantize(AnyArray x, const std::string& elem, const std::string& scale_rule, int axis,
                   const std::string& rounding, std::optional<uint64_t> seed, int threads) {
  const InType in = float_input(x, "x", "quantize");
  require_contiguous(x, "x");
  MxConfig cfg;
  cfg.elem = parse_elem(elem);
  cfg.rule = parse_rule(scale_rule);
  if (rounding == "rne") {
    if (seed) throw nb::value_error("seed applies only with rounding='stochastic'");
    cfg.round = Rounding::RNE;
  } else if (rounding == "stochastic") {
    cfg.round = Rounding::Stochastic;
    cfg.seed = seed.value_or(0);
  } else {
    throw nb::value_error(fmt::format("rounding '{}': expected rne or stochastic", rounding).c_str());
  }
  const std::vector<int64_t> shape = shape_of(x);
  const View v = mx_view(shape, axis, "x");
  cfg.axis = v.axis;
  uint8_t *codes = nullptr, *scales = nullptr;
  auto c = new_array<uint8_t>(shape, &codes);
  auto s = new_array<uint8_t>(scale_shape(shape, v), &scales);
  {
    nb::gil_scoped_release unlocked;
    auto pool = make_pool(threads);
    mx_quantize(x.data(), in, v.rows, v.cols, cfg, codes, scales, {pool.get()});
  }
  return nb::make_tuple(c, s);
}

nb::object dequantize(AnyArray codes, AnyArray scales, const std::string& elem, int axis, std::optional<AnyArray> out,
                      int threads) {
  const ElemType e = parse_elem(elem);
  require_bytes(codes, "codes",
                e == ElemType::E4M3   ? kDLFloat8E4M3FN
                : e == ElemType::E5M2 ? kDLFloat8E5M2
                                      : -1,
                e == ElemType::E4M3   ? "float8_e4m3fn"
                : e == ElemType::E5M2 ? "float8_e5m2"
                                      : nullptr);
  require_bytes(scales, "scales", kDLFloat8E8M0FNU, "float8_e8m0fnu");
  require_contiguous(codes, "codes");
  require_contiguous(scales, "scales");
  const std::vector<int64_t> shape = shape_of(codes);
  const View v = mx_view(shape, axis, "codes");
  const std::vector<int64_t> want = scale_shape(shape, v);
  if (shape_of(scales) != want)
    throw nb::value_error(fmt::format("scales: shape {} does not fit codes of shape {} (expected {})",
                                      shape_str(shape_of(scales)), shape_str(shape), shape_str(want))
                              .c_str());
  float* dst = nullptr;
  nb::object result;
  if (out) {
    require_f32(*out, "out");
    require_contiguous(*out, "out");
    if (shape_of(*out) != shape)
      throw nb::value_error(
          fmt::format("out: shape {} differs from the codes' {}", shape_str(shape_of(*out)), shape_str(shape)).c_str());
    dst = static_cast<float*>(out->data());
    result = nb::cast(*out);
  } else {
    result = nb::cast(new_array<float>(shape, &dst));
  }
  {
    nb::gil_scoped_release unlocked;
    auto pool = make_pool(threads);
    mx_dequantize(static_cast<const uint8_t*>(codes.data()), static_cast<const uint8_t*>(scales.data()), v.rows, v.cols,
                  e, v.axis, dst, {pool.get()});
  }
  return result;
}

using GridSpec = std::variant<std::string, std::pair<int64_t, int64_t>>;

Fp8Grid parse_grid(const GridSpec& g, int64_t rows, int64_t cols) {
  if (const auto* p = std::get_if<std::pair<int64_t, int64_t>>(&g)) {
    if (p->first < 1 || p->second < 1)
      throw nb::value_error(fmt::format("grid ({}, {}): groups must be at least 1x1", p->first, p->second).c_str());
    return {p->first, p->second};
  }
  const std::string& s = std::get<std::string>(g);
  if (s == "per-tensor") return Fp8Grid::per_tensor(rows, cols);
  if (s == "per-token") return Fp8Grid::per_token(cols);
  if (s == "block128") return Fp8Grid::block128_weight();
  if (s == "block128-act") return Fp8Grid::block128_act();
  throw nb::value_error(
      fmt::format("grid '{}': expected per-tensor, per-token, block128, block128-act or (rows, cols)", s).c_str());
}

// Rows and cols of an FP8 grid's 2-D view: the leading dimensions flattened.
std::pair<int64_t, int64_t> fp8_view(const std::vector<int64_t>& shape, const char* label) {
  if (shape.empty()) throw nb::value_error(fmt::format("{}: a 0-d array has no rows", label).c_str());
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return {rows, shape.back()};
}

nb::tuple py_fp8_quantize(AnyArray x, const GridSpec& grid, const std::string& elem, int threads) {
  const InType in = float_input(x, "x", "fp8_quantize");
  require_contiguous(x, "x");
  const ElemType e = parse_elem(elem, true);
  const std::vector<int64_t> shape = shape_of(x);
  const auto [rows, cols] = fp8_view(shape, "x");
  const Fp8Grid g = parse_grid(grid, rows, cols);
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  auto c = new_array<uint8_t>(shape, &codes);
  auto s =
      new_array<float>({(rows + g.group_rows - 1) / g.group_rows, (cols + g.group_cols - 1) / g.group_cols}, &scales);
  {
    nb::gil_scoped_release unlocked;
    auto pool = make_pool(threads);
    fp8_quantize(x.data(), in, rows, cols, g, e, codes, scales, {pool.get()});
  }
  return nb::make_tuple(c, s);
}

nb::ndarray<nb::numpy, float> py_fp8_dequantize(AnyArray codes, AnyArray scales, const GridSpec& grid,
                                             const std::string& elem, int threads) {
  const ElemType e = parse_elem(elem, true);
  require_bytes(codes, "codes", e == ElemType::E4M3 ? kDLFloat8E4M3FN : kDLFloat8E5M2,
                e == ElemType::E4M3 ? "float8_e4m3fn" : "float8_e5m2");
  require_f32(scales, "scales");
  require_contiguous(codes, "codes");
  require_contiguous(scales, "scales");
  const std::vector<int64_t> shape = shape_of(codes);
  const auto [rows, cols] = fp8_view(shape, "codes");
  const Fp8Grid g = parse_grid(grid, rows, cols);
  const std::vector<int64_t> want = {(rows + g.group_rows - 1) / g.group_rows,
                                     (cols + g.group_cols - 1) / g.group_cols};
  if (shape_of(scales) != want)
    throw nb::value_error(fmt::format("scales: shape {} does not fit codes of shape {} (expected {})",
                                      shape_str(shape_of(scales)), shape_str(shape), shape_str(want))
                              .c_str());
  float* dst = nullptr;
  auto out = new_array<float>(shape, &dst);
  {
    nb::gil_scoped_release unlocked;
    auto pool = make_pool(threads);
    fp8_dequantize(static_cast<const uint8_t*>(codes.data()), static_cast<const float*>(scales.data()), rows, cols, g,
                   e, dst, {pool.get()});
  }
  return out;
}

nb::dict format_info(const std::string& elem) {
  const ElemTraits& t = elem_traits(parse_elem(elem));
  nb::dict d;
  d["name"] = t.name;
  d["bits"] = t.bits;
  d["ebits"] = t.ebits;
  d["mbits"] = t.mbits;
  d["bias"] = t.bias;
  d["emax"] = t.emax;
  d["max_normal"] = t.max_normal;
  d["max_code"] = t.max_code;
  d["has_inf"] = t.has_inf;
  d["has_nan"] = t.has_nan;
  return d;
}

nb::ndarray<nb::numpy, float> elem_grid(const std::string& elem) {
  const ElemType e = parse_elem(elem);
  const int n = elem_traits(e).num_codes();
  float* p = nullptr;
  auto out = new_array<float>({n}, &p);
  for (int c = 0; c < n; ++c) p[c] = elem_decode(e, static_cast<uint8_t>(c));
  return out;
}

}  // namespace

void bind_numerics(nb::module_& m) {
  m.def("quantize", &quantize, nb::arg("x"), nb::arg("elem") = "e4m3", nb::arg("scale_rule") = "rceil",
        nb::arg("axis") = -1, nb::arg("rounding") = "rne", nb::arg("seed") = nb::none(), nb::arg("threads") = 0,
        R"doc(MX-quantize ``x`` (OCP Microscaling v1.0; docs/reference.md §3): one E8M0 scale per 32 values.

x: a C-contiguous CPU array (numpy, or torch and others through DLPack) of
  float32, bfloat16 or float16; read in place, never copied.
elem: e4m3 (MXFP8), e5m2, e3m2, e2m3 (MXFP6) or e2m1 (MXFP4).
scale_rule: rceil (amax / max_normal rounded up to a power of two) or floor (OCP).
axis: -1 for 1x32 blocks along the last axis (leading axes flattened into
  rows), 0 for 32x1 blocks down the first axis of a 2-D array.
rounding: rne, or stochastic with ``seed`` (counter-based: the draw of element
  (r, c) depends only on the seed and r * cols + c).
threads: worker threads (0: every core).

Returns (codes, scales), both uint8 numpy arrays: codes has x's shape (FP6/FP4
codes in the low bits of each byte; view as torch.float8_e4m3fn for e4m3), scales
x's shape with the blocked axis divided by 32. Bit for bit what
``mxrl quantize`` writes for the same tensor (the CLI seeds stochastic rounding
per tensor with ``tensor_seed(seed, name)``).

Raises TypeError for another dtype, ValueError for a shape that does not block.)doc");
  m.def("dequantize", &dequantize, nb::arg("codes"), nb::arg("scales"), nb::arg("elem") = "e4m3", nb::arg("axis") = -1,
        nb::arg("out") = nb::none(), nb::arg("threads") = 0,
        R"doc(Decode MX ``codes`` with their E8M0 ``scales`` to float32: decode(code) * 2^(scale - 127),
one FP32 rounding; a 0xFF (NaN) scale gives NaN.

codes, scales: uint8 arrays as ``quantize`` returns them (or float8 through DLPack).
out: optional float32 array of codes' shape, written in place (e.g. a torch
  tensor) and returned; otherwise a new numpy array is returned.)doc");
  m.def("fp8_quantize", &py_fp8_quantize, nb::arg("x"), nb::arg("grid") = "per-tensor", nb::arg("elem") = "e4m3",
        nb::arg("threads") = 0,
        R"doc(Quantize ``x`` onto an FP8 grid other rollout engines use: one FP32 scale per group,
scale = fp32(amax / max_normal), code = RNE_saturating(fp32(x / scale)).

grid: per-tensor, per-token (1 x cols), block128 (128x128 weight tiles),
  block128-act (1x128), or a (group_rows, group_cols) pair; groups are clipped at
  the edges. The leading axes of x are flattened into rows.
Returns (codes uint8 of x's shape, scales float32 [ceil(rows/gr), ceil(cols/gc)]).)doc");
  m.def("fp8_dequantize", &py_fp8_dequantize, nb::arg("codes"), nb::arg("scales"), nb::arg("grid") = "per-tensor",
        nb::arg("elem") = "e4m3", nb::arg("threads") = 0,
        "Decode FP8 ``codes`` with their FP32 group ``scales``: fp32(decode(code) * scale).");
  m.def("format_info", &format_info, nb::arg("elem"),
        "The traits of an MX element type: bits, exponent/mantissa bits, bias, emax, max_normal, NaN/Inf.");
  m.def("elem_grid", &elem_grid, nb::arg("elem"),
        "Every value of an element type's grid, indexed by code (float32; NaN codes give NaN).");
  m.def("tensor_seed", &tensor_seed, nb::arg("seed"), nb::arg("name"),
        "The stochastic-rounding seed `mxrl quantize --seed SEED` uses for tensor NAME.");
}

}  // namespace mxrl
