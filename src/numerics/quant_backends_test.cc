// Every backend (run on 3 threads) agrees bit for bit with the scalar
// reference run on one thread, on random and edge-case inputs, for every
// element type, scale rule, axis, rounding and input type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "numerics/bf16.h"
#include "numerics/fp8_grid.h"
#include "numerics/mx.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

std::vector<Backend> backends() {
  std::vector<Backend> b{Backend::Scalar};
  if (cpu_features().avx2) b.push_back(Backend::Avx2);
  if (cpu_features().avx512) b.push_back(Backend::Avx512);
  return b;
}

// Blocks of 32 (along the row) drawn from a menu of hard cases.
std::vector<float> edge_case_tensor(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(rows * cols);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  for (int64_t i = 0; i < rows * cols; i += 32) {
    float* b = &x[i];
    const int k = std::min<int64_t>(32, rows * cols - i);
    const float mag = std::ldexp(1.0f, pick(260) - 140);
    for (int j = 0; j < k; ++j) b[j] = nd(rng) * mag;
    switch (pick(12)) {
      case 0:  // amax significand at and around 1.75 (and just under 2)
      case 1: {
        const uint32_t m = (pick(4) == 0) ? 0x7FFFFF : 0x600000 + pick(5) - 2;
        b[pick(k)] = f32_from_bits((static_cast<uint32_t>(pick(200) + 20) << 23) | m) * (pick(2) ? 1 : -1);
        break;
      }
      case 2:  // exact ties on the element grid: amax 2^8 puts E4M3 e at 0
        b[0] = 256.0f;
        for (int j = 1; j < k; ++j) b[j] = (pick(64) + 0.5f) * std::ldexp(1.0f, pick(12) - 12);
        break;
      case 3:  // tiny elements beside a large one: element subnormals and underflow
        b[pick(k)] = mag * 1e6f;
        for (int j = 0; j < k; ++j)
          if (pick(2)) b[j] = mag * std::ldexp(1.0f, -pick(40));
        break;
      case 4:
        std::fill(b, b + k, 0.0f);
        if (pick(2)) b[pick(k)] = -0.0f;
        break;
      case 5: b[pick(k)] = std::numeric_limits<float>::quiet_NaN(); break;
      case 6: b[pick(k)] = (pick(2) ? 1 : -1) * std::numeric_limits<float>::infinity(); break;
      case 7:  // FP32 subnormals
        for (int j = 0; j < k; ++j) b[j] = f32_from_bits(static_cast<uint32_t>(rng() & 0x807FFFFF));
        break;
      case 8: b[pick(k)] = std::numeric_limits<float>::max(); break;
      default: break;
    }
  }
  return x;
}

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      FAIL() << what << ": first difference at " << i;
    }
}

struct Source {
  std::vector<float> f32;
  std::vector<uint16_t> half;  // bf16 or f16 bits
  InType in;
  const void* data() const {
    return in == InType::F32 || in == InType::F32AsBF16 ? static_cast<const void*>(f32.data()) : half.data();
  }
};

Source make_source(InType in, int64_t rows, int64_t cols, uint32_t seed) {
  Source s{edge_case_tensor(rows, cols, seed), {}, in};
  if (in == InType::BF16 || in == InType::F16) {
    std::mt19937 rng(seed);
    s.half.resize(s.f32.size());
    for (size_t i = 0; i < s.f32.size(); ++i)
      s.half[i] = (i % 7 == 0) ? static_cast<uint16_t>(rng())  // random bit patterns too
                               : (in == InType::BF16 ? f32_to_bf16(s.f32[i]) : f32_to_f16(s.f32[i]));
  }
  return s;
}

TEST(QuantBackends, MxQuantizeMatchesScalarReference) {
  ThreadPool pool(3);
  uint32_t seed = 100;
  for (Backend be : backends())
    for (InType in : {InType::F32, InType::BF16, InType::F16, InType::F32AsBF16})
      for (ElemType t : kAllElemTypes)
        for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::RCeil})
          for (Axis axis : {Axis::Row, Axis::Col})
            for (Rounding rnd : {Rounding::RNE, Rounding::Stochastic}) {
              // Rows of 21 blocks: the AVX-512 row kernel's 16-block path and its tail.
              const int64_t rows = axis == Axis::Row ? 13 : 96, cols = axis == Axis::Row ? 672 : 53;
              const Source src = make_source(in, rows, cols, ++seed);
              const MxConfig cfg{t, rule, axis, rnd, seed};
              const int64_t ns = mx_num_scales(rows, cols, axis);
              std::vector<uint8_t> c0(rows * cols), s0(ns), c1(rows * cols, 0xAA), s1(ns, 0xAA);
              mx_quantize(src.data(), in, rows, cols, cfg, c0.data(), s0.data(), {nullptr, Backend::Scalar});
              mx_quantize(src.data(), in, rows, cols, cfg, c1.data(), s1.data(), {&pool, be});
              const std::string what = std::string(backend_name(be)) + " " + elem_traits(t).name + " " +
                                       scale_rule_name(rule) + " " + axis_name(axis) + " " + rounding_name(rnd) +
                                       " in=" + std::to_string(int(in));
              expect_same_bits(s0, s1, what + " scales");
              expect_same_bits(c0, c1, what + " codes");
              // Dequantize back, both ways.
              std::vector<float> y0(rows * cols), y1(rows * cols);
              mx_dequantize(c0.data(), s0.data(), rows, cols, t, axis, y0.data(), {nullptr, Backend::Scalar});
              mx_dequantize(c0.data(), s0.data(), rows, cols, t, axis, y1.data(), {&pool, be});
              expect_same_bits(y0, y1, what + " dequant");
            }
}

// FP32 read as F32AsBF16 quantizes to the bytes of its BF16 rounding read as
// BF16 (bf16_encode first), on every backend, MX rows and columns and FP8
// grids alike: the contract that lets a model's prepare skip the BF16 copy.
TEST(QuantBackends, F32AsBf16IsTheBf16CopyQuantized) {
  ThreadPool pool(2);
  uint32_t seed = 900;
  const int64_t rows = 64, cols = 672;
  for (Backend be : backends())
    for (ElemType t : {ElemType::E4M3, ElemType::E5M2, ElemType::E2M1}) {
      std::vector<float> x = edge_case_tensor(rows, cols, ++seed);
      // Inputs whose rounding is special, one per row in the rows' first 16
      // blocks: values that round to Inf or stay just below it, NaNs whose
      // payload would carry into the sign, a tie to even at the top.
      const uint32_t special[] = {0x7F7FFFFF, 0xFF7F8000, 0x7F7F7FFF, 0x7F7F8000, 0x7F800001,
                                  0x7FFFFFFF, 0xFFFFFFFF, 0xFF800000, 0x3F808000, 0x00008000};
      for (int64_t r = 0; r < rows; r += 2)
        x[r * cols + (r * 37) % (16 * kMxBlock)] = f32_from_bits(special[r / 2 % 10]);
      std::vector<uint16_t> bf(x.size());
      bf16_encode(x.data(), rows * cols, bf.data(), {nullptr, Backend::Scalar});
      const std::string what = std::string(backend_name(be)) + " " + elem_traits(t).name;
      for (Axis axis : {Axis::Row, Axis::Col}) {
        const MxConfig cfg{t, ScaleRule::RCeil, axis, Rounding::RNE, 0};
        const int64_t ns = mx_num_scales(rows, cols, axis);
        std::vector<uint8_t> c0(x.size()), s0(ns), c1(x.size(), 0xAA), s1(ns, 0xAA);
        mx_quantize(bf.data(), InType::BF16, rows, cols, cfg, c0.data(), s0.data(), {nullptr, Backend::Scalar});
        mx_quantize(x.data(), InType::F32AsBF16, rows, cols, cfg, c1.data(), s1.data(), {&pool, be});
        expect_same_bits(s0, s1, what + " " + axis_name(axis) + " scales");
        expect_same_bits(c0, c1, what + " " + axis_name(axis) + " codes");
      }
      if (t == ElemType::E2M1) continue;  // FP8 grids hold FP8 elements only
      const Fp8Grid g = Fp8Grid::block128_weight();
      const int64_t ns = fp8_num_scales(rows, cols, g);
      std::vector<uint8_t> c0(x.size()), c1(x.size(), 0xAA);
      std::vector<float> s0(ns), s1(ns);
      fp8_quantize(bf.data(), InType::BF16, rows, cols, g, t, c0.data(), s0.data(), {nullptr, Backend::Scalar});
      fp8_quantize(x.data(), InType::F32AsBF16, rows, cols, g, t, c1.data(), s1.data(), {&pool, be});
      expect_same_bits(s0, s1, what + " fp8 scales");
      expect_same_bits(c0, c1, what + " fp8 codes");
    }
}

// E4M3 row blocks of BF16 values (BF16 input, FP32 read as BF16) take a
// 16-bit path on AVX-512 (quant_avx512.cc): the E4M3 code from the BF16 bits
// by integer arithmetic, blocks with an element in the subnormal band or a
// scale byte under 16 left to the FP32 path. Blocks as a model's weights
// have them (every scale byte), with elements planted on and between grid
// points (RNE ties) at every distance below the block's maximum, so that the
// band's edges, its inside and the values that round to zero all occur.
TEST(QuantBackends, E4m3RowsOfBf16ValuesMatchTheReference) {
  ThreadPool pool(2);
  std::mt19937 rng(77);
  const int64_t rows = 32, cols = 1024 + 5 * kMxBlock;  // two 16-block groups and a tail
  std::vector<float> x(rows * cols);
  for (int64_t b = 0; b < rows * cols / kMxBlock; ++b) {
    float* v = &x[b * kMxBlock];
    const int top = static_cast<int>(rng() % 254) - 126;  // the block maximum's exponent: every scale byte
    for (int j = 0; j < kMxBlock; ++j) {
      const int below = static_cast<int>(rng() % 24);  // 2^-10 .. 2^-7 of the maximum's scale and far below
      const float grid = 1.0f + static_cast<float>(rng() % 8) / 8 + (rng() % 2 ? 1.0f / 16 : 0.0f);
      float e = std::ldexp(grid, top - below);
      if (rng() % 3 == 0) e = f32_from_bits(f32_bits(e) + (rng() % 3 == 0 ? 0x8000u : rng() % 0x10000u));  // BF16 rounding
      v[j] = rng() % 2 ? -e : e;
    }
    v[rng() % kMxBlock] = std::ldexp(rng() % 2 ? 1.75f : 1.0f, top);  // the maximum itself
    switch (rng() % 8) {
      case 0: v[rng() % kMxBlock] = rng() % 2 ? 0.0f : -0.0f; break;
      case 1: v[rng() % kMxBlock] = f32_from_bits(0x00400000u | (rng() % 2) << 31); break;  // FP32 subnormal
      case 2: v[rng() % kMxBlock] = f32_from_bits(0x007FFFFFu); break;  // rounds to the smallest BF16 normal
      default: break;
    }
  }
  std::vector<uint16_t> bf(x.size());
  bf16_encode(x.data(), rows * cols, bf.data(), {nullptr, Backend::Scalar});
  for (Backend be : backends())
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::RCeil})
      for (InType in : {InType::BF16, InType::F32AsBF16}) {
        const MxConfig cfg{ElemType::E4M3, rule, Axis::Row, Rounding::RNE, 0};
        const void* src = in == InType::BF16 ? static_cast<const void*>(bf.data()) : x.data();
        const int64_t ns = mx_num_scales(rows, cols, Axis::Row);
        std::vector<uint8_t> c0(x.size()), s0(ns), c1(x.size(), 0xAA), s1(ns, 0xAA);
        mx_quantize(src, in, rows, cols, cfg, c0.data(), s0.data(), {nullptr, Backend::Scalar});
        mx_quantize(src, in, rows, cols, cfg, c1.data(), s1.data(), {&pool, be});
        const std::string what = std::string(backend_name(be)) + " " + scale_rule_name(rule) + " in=" +
                                 std::to_string(static_cast<int>(in));
        expect_same_bits(s0, s1, what + " scales");
        expect_same_bits(c0, c1, what + " codes");
      }
}

// The one-pass round trip (activations and gradients on the MX grid) is the
// scalar quantize-then-dequantize, bit for bit, in place or not.
TEST(QuantBackends, MxRoundTripRowsIsQuantizeThenDequantize) {
  ThreadPool pool(3);
  uint32_t seed = 500;
  for (Backend be : backends())
    for (ElemType t : kAllElemTypes)
      for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::RCeil})
        for (Rounding rnd : {Rounding::RNE, Rounding::Stochastic}) {
          const int64_t rows = 67, cols = 672;
          const std::vector<float> x = edge_case_tensor(rows, cols, ++seed);
          const MxConfig cfg{t, rule, Axis::Row, rnd, seed};
          std::vector<uint8_t> c(rows * cols), sc(mx_num_scales(rows, cols, Axis::Row));
          std::vector<float> want(rows * cols), got(rows * cols), in_place = x;
          mx_quantize(x.data(), InType::F32, rows, cols, cfg, c.data(), sc.data(), {nullptr, Backend::Scalar});
          mx_dequantize(c.data(), sc.data(), rows, cols, t, Axis::Row, want.data(), {nullptr, Backend::Scalar});
          mx_round_trip_rows(x.data(), rows, cols, cfg, got.data(), {&pool, be});
          mx_round_trip_rows(in_place.data(), rows, cols, cfg, in_place.data(), {nullptr, be});
          const std::string what = std::string(backend_name(be)) + " " + elem_traits(t).name + " " +
                                   scale_rule_name(rule) + " " + rounding_name(rnd);
          expect_same_bits(want, got, what);
          expect_same_bits(want, in_place, what + " in place");
        }
  const std::vector<float> x(64, 1.0f);
  std::vector<float> y(64);
  EXPECT_THROW(
      mx_round_trip_rows(x.data(), 32, 2, {ElemType::E4M3, ScaleRule::RCeil, Axis::Col, Rounding::RNE, 0}, y.data()),
      Error);
}

TEST(QuantBackends, MxDequantizeOfArbitraryBytes) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  const int64_t rows = 64, cols = 96;
  std::vector<uint8_t> codes(rows * cols), scales(rows * cols);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(rng());
  for (Backend be : backends())
    for (ElemType t : kAllElemTypes)
      for (Axis axis : {Axis::Row, Axis::Col}) {
        const uint8_t mask = static_cast<uint8_t>(elem_traits(t).num_codes() - 1);
        std::vector<uint8_t> c(codes);
        for (auto& v : c) v &= mask;
        std::vector<float> y0(rows * cols), y1(rows * cols);
        mx_dequantize(c.data(), scales.data(), rows, cols, t, axis, y0.data(), {nullptr, Backend::Scalar});
        mx_dequantize(c.data(), scales.data(), rows, cols, t, axis, y1.data(), {&pool, be});
        expect_same_bits(y0, y1, std::string(backend_name(be)) + " " + elem_traits(t).name);
      }
}

TEST(QuantBackends, Fp8GridsMatchScalarReference) {
  ThreadPool pool(3);
  uint32_t seed = 500;
  const int64_t rows = 200, cols = 300;
  for (Backend be : backends())
    for (InType in : {InType::F32, InType::BF16, InType::F32AsBF16})
      for (ElemType t : {ElemType::E4M3, ElemType::E5M2})
        for (Fp8Grid g : {Fp8Grid::per_tensor(rows, cols), Fp8Grid::per_token(cols), Fp8Grid::block128_weight(),
                          Fp8Grid::block128_act()}) {
          Source src = make_source(in, rows, cols, ++seed);
          if (seed % 2) {  // half the cases without NaN/Inf, so scales stay finite
            for (auto& v : src.f32)
              if (!std::isfinite(v)) v = 1.0f;
            for (auto& h : src.half)
              if ((h & 0x7F80) == 0x7F80) h = 0x3F80;
          }
          const int64_t ns = fp8_num_scales(rows, cols, g);
          std::vector<uint8_t> c0(rows * cols), c1(rows * cols, 0xAA);
          std::vector<float> s0(ns), s1(ns);
          fp8_quantize(src.data(), in, rows, cols, g, t, c0.data(), s0.data(), {nullptr, Backend::Scalar});
          fp8_quantize(src.data(), in, rows, cols, g, t, c1.data(), s1.data(), {&pool, be});
          const std::string what = std::string(backend_name(be)) + " group " + std::to_string(g.group_rows) + "x" +
                                   std::to_string(g.group_cols);
          expect_same_bits(s0, s1, what + " scales");
          expect_same_bits(c0, c1, what + " codes");
          std::vector<float> y0(rows * cols), y1(rows * cols);
          fp8_dequantize(c0.data(), s0.data(), rows, cols, g, t, y0.data(), {nullptr, Backend::Scalar});
          fp8_dequantize(c0.data(), s0.data(), rows, cols, g, t, y1.data(), {&pool, be});
          expect_same_bits(y0, y1, what + " dequant");
        }
}

}  // namespace
}  // namespace mxrl

namespace mxrl {
namespace {

// Bulk BF16 rounding on every backend equals f32_to_bf16 lane by lane: ties
// both ways, the carry into the exponent, the largest finite values that round
// to infinity, subnormals, signed zeros, infinities and NaNs (payload kept in
// the top bits, quieted), over lengths that exercise every tail mask.
TEST(QuantBackends, Bf16EncodeAndRoundMatchTheScalarFormula) {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x3FFF8000u,
                                0x7F7F8000u, 0x7F7FFFFFu, 0xFF7F8000u, 0x00000001u, 0x807FFFFFu, 0x00008000u,
                                0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFF810000u, 0x7FC00000u, 0x7FBFFFFFu};
  std::mt19937 rng(11);
  for (int i = 0; i < 40000; ++i) bits.push_back(rng());  // several pool chunks
  for (Backend be : backends())
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(15), int64_t(17), int64_t(bits.size())}) {
      SCOPED_TRACE(::testing::Message() << backend_name(be) << " n=" << n);
      std::vector<float> x(n);
      if (n > 0) std::memcpy(x.data(), bits.data(), n * 4);
      std::vector<uint16_t> enc(n + 1, 0xABCD);
      std::vector<float> rnd(n + 1, 7.0f);
      ThreadPool pool(3);
      const Exec exec{&pool, be};
      bf16_encode(x.data(), n, enc.data(), exec);
      bf16_round(x.data(), n, rnd.data(), exec);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(enc[i], f32_to_bf16(x[i])) << std::hex << bits[i];
        ASSERT_EQ(f32_bits(rnd[i]), uint32_t(f32_to_bf16(x[i])) << 16) << std::hex << bits[i];
      }
      EXPECT_EQ(enc[n], 0xABCD);  // nothing written past n
      EXPECT_EQ(rnd[n], 7.0f);
    }
}

}  // namespace
}  // namespace mxrl
