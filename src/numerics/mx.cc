#include "numerics/mx.h"

#include <algorithm>
#include <memory>

#include "numerics/quant_kernels.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

const char* scale_rule_name(ScaleRule r) { return r == ScaleRule::Floor ? "floor" : "rceil"; }
const char* axis_name(Axis a) { return a == Axis::Row ? "row" : "col"; }
const char* rounding_name(Rounding r) { return r == Rounding::RNE ? "rne" : "stochastic"; }

uint8_t mx_scale_byte(uint32_t amax_bits, ElemType elem, ScaleRule rule) {
  const ElemTraits& f = elem_traits(elem);
  if (rule == ScaleRule::Floor) {
    // Exponent field of amax (an FP32 subnormal or zero reads as -127).
    const int e = std::clamp(static_cast<int>(amax_bits >> 23) - 127 - f.emax, -127, 127);
    return static_cast<uint8_t>(e + 127);
  }
  const float descale = f32_from_bits(amax_bits) * (1.0f / f.max_normal);
  const uint32_t d = f32_bits(descale);
  const uint32_t exp = d >> 23, mant = d & 0x7FFFFFu;
  if (exp == 0) return mant > 0x400000u ? 1 : 0;
  return static_cast<uint8_t>(exp + (mant != 0 ? 1 : 0));  // amax <= FLT_MAX keeps this <= 254
}

int64_t mx_num_scales(int64_t rows, int64_t cols, Axis axis) {
  return axis == Axis::Row ? rows * (cols / kMxBlock) : (rows / kMxBlock) * cols;
}

namespace detail {
const QuantKernels& quant_kernels(Backend b) {
  return backend_table(b, kScalarKernels, MXRL_AVX2(kAvx2Kernels), MXRL_AVX512(kAvx512Kernels));
}
}  // namespace detail

namespace {
constexpr int64_t kGrainElems = 1 << 14;  // elements per task, at least

void check_shape(int64_t rows, int64_t cols, Axis axis) {
  if (rows < 0 || cols < 0) fail("mx: negative shape [{}, {}]", rows, cols);
  if (axis == Axis::Row && cols % kMxBlock != 0)
    fail("mx: row blocks need the last dimension ({}) to be a multiple of {}", cols, kMxBlock);
  if (axis == Axis::Col && rows % kMxBlock != 0)
    fail("mx: col blocks need the first dimension ({}) to be a multiple of {}", rows, kMxBlock);
}

// Column-axis work is split into (32-row group) x (column chunk) tiles.
constexpr int64_t kColChunk = 256;

template <typename Fn>
void for_col_tiles(ThreadPool* pool, int64_t rows, int64_t cols, Fn&& fn) {
  const int64_t groups = rows / kMxBlock, chunks = (cols + kColChunk - 1) / kColChunk;
  const int64_t grain = std::max<int64_t>(1, kGrainElems / (kMxBlock * kColChunk));
  parallel_for(
      pool, groups * chunks,
      [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t g = t / chunks, c0 = (t % chunks) * kColChunk;
          fn(g, c0, std::min(cols, c0 + kColChunk));
        }
      },
      grain);
}
}  // namespace

void mx_quantize(const void* x, InType in, int64_t rows, int64_t cols, const MxConfig& cfg, uint8_t* codes,
                 uint8_t* scales, const Exec& exec) {
  check_shape(rows, cols, cfg.axis);
  const auto& k = detail::quant_kernels(exec.backend);
  if (cfg.axis == Axis::Row) {
    const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(cols, 1));
    parallel_for(
        exec.pool, rows, [&](int64_t r0, int64_t r1) { k.mx_quant_row(x, in, cols, r0, r1, cfg, codes, scales); },
        grain);
  } else {
    for_col_tiles(exec.pool, rows, cols, [&](int64_t g, int64_t c0, int64_t c1) {
      k.mx_quant_col(x, in, cols, g, g + 1, c0, c1, cfg, codes, scales);
    });
  }
}

void mx_dequantize(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, ElemType elem, Axis axis,
                   float* out, const Exec& exec) {
  check_shape(rows, cols, axis);
  const auto& k = detail::quant_kernels(exec.backend);
  if (axis == Axis::Row) {
    const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(cols, 1));
    parallel_for(
        exec.pool, rows, [&](int64_t r0, int64_t r1) { k.mx_dequant_row(codes, scales, cols, r0, r1, elem, out); },
        grain);
  } else {
    for_col_tiles(exec.pool, rows, cols, [&](int64_t g, int64_t c0, int64_t c1) {
      k.mx_dequant_col(codes, scales, cols, g, g + 1, c0, c1, elem, out);
    });
  }
}

void mx_round_trip_rows(const float* x, int64_t rows, int64_t cols, const MxConfig& cfg, float* out, const Exec& exec) {
  if (cfg.axis != Axis::Row) fail("mx_round_trip_rows: row blocks only");
  check_shape(rows, cols, cfg.axis);
  const auto& k = detail::quant_kernels(exec.backend);
  const int64_t grain = std::max<int64_t>(1, kGrainElems / std::max<int64_t>(cols, 1));
  if (k.mx_round_trip_row && cfg.round == Rounding::RNE) {
    parallel_for(
        exec.pool, rows, [&](int64_t r0, int64_t r1) { k.mx_round_trip_row(x, cols, r0, r1, cfg, out); }, grain);
    return;
  }
  // Whole-tensor buffers (the kernels index them globally, as stochastic
  // rounding counts elements globally), left uninitialised: every byte is
  // written before it is read.
  std::unique_ptr<uint8_t[]> codes(new uint8_t[rows * cols]), scales(new uint8_t[mx_num_scales(rows, cols, Axis::Row)]);
  parallel_for(
      exec.pool, rows,
      [&](int64_t r0, int64_t r1) {
        k.mx_quant_row(x, InType::F32, cols, r0, r1, cfg, codes.get(), scales.get());
        k.mx_dequant_row(codes.get(), scales.get(), cols, r0, r1, cfg.elem, out);
      },
      grain);
}

}  // namespace mxrl
