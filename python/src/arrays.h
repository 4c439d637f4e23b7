// Arrays across the Python boundary, without copies: inputs are read in place
// from any CPU array that speaks the buffer protocol or DLPack (numpy, torch,
// jax, ...); outputs are allocated here and handed to numpy, which owns them
// from then on (torch.from_dlpack(out) shares that memory too).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "numerics/mx.h"
#include "util/text.h"  // shape_str

namespace mxrl {
namespace nb = nanobind;

using AnyArray = nb::ndarray<nb::device::cpu>;

// "[2, 64]"
std::vector<int64_t> shape_of(const AnyArray& a);
// numpy's spelling of an array's dtype ("float32", "bfloat16", "int64", ...).
std::string dtype_str(const AnyArray& a);

// Throws ValueError "LABEL: ..." unless `a` is C-contiguous (no silent copy).
void require_contiguous(const AnyArray& a, const char* label);
// The high-precision input type of `a`: float32, bfloat16 or float16; else
// TypeError "LABEL: dtype D is not supported; WHAT takes float32, bfloat16 or float16".
InType float_input(const AnyArray& a, const char* label, const char* what);
// DLPack 1.1 codes of the 1-byte float types MX data travels as.
inline constexpr int kDLFloat8E4M3FN = 10, kDLFloat8E5M2 = 12, kDLFloat8E8M0FNU = 14;
// Throws TypeError unless `a` holds uint8 bytes, or the float8 type whose
// DLPack code is `float8_code` (named `float8_name`; -1: none).
void require_bytes(const AnyArray& a, const char* label, int float8_code = -1, const char* float8_name = nullptr);
void require_f32(const AnyArray& a, const char* label);

// A fresh numpy array of `shape`, owned by Python.
template <typename T>
nb::ndarray<nb::numpy, T> new_array(const std::vector<int64_t>& shape, T** data);

template <typename T>
nb::ndarray<nb::numpy, T> to_array(const std::vector<T>& v) {
  T* p = nullptr;
  auto out = new_array<T>({static_cast<int64_t>(v.size())}, &p);
  std::copy(v.begin(), v.end(), p);
  return out;
}

}  // namespace mxrl

#include <nlohmann/json.hpp>
namespace mxrl {
// JSON across the boundary (through Python's json module: dicts, lists, str, int, float, bool, None).
nb::object json_to_py(const nlohmann::json& j);
nlohmann::json py_to_json(nb::handle h, const char* label);
}  // namespace mxrl
