#include "arrays.h"

#include <nanobind/stl/string.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mxrl {

std::vector<int64_t> shape_of(const AnyArray& a) {
  std::vector<int64_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = static_cast<int64_t>(a.shape(i));
  return s;
}

std::string dtype_str(const AnyArray& a) {
  const nb::dlpack::dtype d = a.dtype();
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int: kind = "int"; break;
    case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
    case nb::dlpack::dtype_code::Float: kind = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
    case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    default:
      switch (d.code) {  // DLPack 1.1 float8 types
        case 10: return "float8_e4m3fn";
        case 12: return "float8_e5m2";
        case 14: return "float8_e8m0fnu";
        default: return fmt::format("dlpack(code {}, {} bits)", d.code, d.bits);
      }
  }
  std::string s = fmt::format("{}{}", kind, d.bits);
  if (d.lanes != 1) s += fmt::format("x{}", d.lanes);
  return s;
}

void require_contiguous(const AnyArray& a, const char* label) {
  if (a.size() == 0) return;  // nothing to read (numpy gives empty arrays arbitrary strides)
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect)
      throw nb::value_error(fmt::format("{}: the array of shape {} is not C-contiguous; mxrl reads arrays in place "
                                        "and does not copy them (pass a contiguous copy, e.g. x.contiguous())",
                                        label, shape_str(shape_of(a)))
                                .c_str());
    expect *= static_cast<int64_t>(a.shape(i));
  }
}

InType float_input(const AnyArray& a, const char* label, const char* what) {
  const nb::dlpack::dtype d = a.dtype();
  if (d.lanes == 1 && d.bits == 32 && d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) return InType::F32;
  if (d.lanes == 1 && d.bits == 16 && d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat))
    return InType::BF16;
  if (d.lanes == 1 && d.bits == 16 && d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) return InType::F16;
  throw nb::type_error(
      fmt::format("{}: dtype {} is not supported; {} takes float32, bfloat16 or float16", label, dtype_str(a), what)
          .c_str());
}

void require_bytes(const AnyArray& a, const char* label, int float8_code, const char* float8_name) {
  const nb::dlpack::dtype d = a.dtype();
  if (d.bits == 8 && d.lanes == 1 &&
      (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt) || (float8_code >= 0 && d.code == float8_code)))
    return;
  throw nb::type_error(fmt::format("{}: dtype {} is not supported; expected uint8{}{}", label, dtype_str(a),
                                   float8_name ? " or " : "", float8_name ? float8_name : "")
                           .c_str());
}

void require_f32(const AnyArray& a, const char* label) {
  const nb::dlpack::dtype d = a.dtype();
  if (d.bits == 32 && d.lanes == 1 && d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) return;
  throw nb::type_error(fmt::format("{}: dtype {} is not supported; expected float32", label, dtype_str(a)).c_str());
}

template <typename T>
nb::ndarray<nb::numpy, T> new_array(const std::vector<int64_t>& shape, T** data) {
  size_t n = 1;
  for (int64_t s : shape) n *= static_cast<size_t>(s);
  T* p = new T[n > 0 ? n : 1];  // not zeroed: every caller writes every element
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<T*>(q); });
  std::vector<size_t> sh(shape.begin(), shape.end());
  *data = p;
  return nb::ndarray<nb::numpy, T>(p, sh.size(), sh.data(), owner);
}

template nb::ndarray<nb::numpy, uint8_t> new_array<uint8_t>(const std::vector<int64_t>&, uint8_t**);
template nb::ndarray<nb::numpy, float> new_array<float>(const std::vector<int64_t>&, float**);
template nb::ndarray<nb::numpy, int32_t> new_array<int32_t>(const std::vector<int64_t>&, int32_t**);

}  // namespace mxrl

namespace mxrl {
nb::object json_to_py(const nlohmann::json& j) {
  return nb::module_::import_("json").attr("loads")(nb::str(j.dump().c_str()));
}

nlohmann::json py_to_json(nb::handle h, const char* label) {
  std::string s;
  try {
    s = nb::cast<std::string>(nb::module_::import_("json").attr("dumps")(h));
  } catch (const nb::python_error& e) {
    throw nb::type_error(fmt::format("{}: not JSON-serialisable: {}", label, e.what()).c_str());
  }
  return nlohmann::json::parse(s);
}
}  // namespace mxrl
