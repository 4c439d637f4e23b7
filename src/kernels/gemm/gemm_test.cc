// The GEMM contract: every backend, on any number of threads, equals the plain
// sequential-FMA reference bit for bit, for every weight format, and a row's
// result does not depend on the batch it is computed in.
#include "kernels/gemm/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Every engine this CPU runs: the scalar backend, and the AVX-512 one with
// the pair chain on FMAs, (where the self-test passed) on VDPBF16PS, and as
// Auto chose them per shape class (pair_kernel_choice).
struct Engine {
  Backend be;
  PairKernel pk;
  const char* name;
};
std::vector<Engine> engines() {
  std::vector<Engine> e{{Backend::Scalar, PairKernel::Auto, "scalar"}};
  if (cpu_features().avx2) e.push_back({Backend::Avx2, PairKernel::Auto, "avx2"});
  if (cpu_features().avx512) {
    e.push_back({Backend::Avx512, PairKernel::Fma, "avx512-fma"});
    if (detail::bf16_dot_self_test() == "passed") e.push_back({Backend::Avx512, PairKernel::Dot, "avx512-dot"});
    e.push_back({Backend::Avx512, PairKernel::Auto, "avx512-auto"});
  }
  return e;
}

void expect_same_bits(const float* a, const float* b, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i)
    if (f32_bits(a[i]) != f32_bits(b[i])) {
      ADD_FAILURE() << what << ": first difference at " << i << ": " << a[i] << " (0x" << std::hex << f32_bits(a[i])
                    << ") vs " << b[i] << " (0x" << f32_bits(b[i]) << ")" << std::dec;
      return;
    }
}

// Values of very different magnitudes: a per-row scale over 2^-30..2^30, a
// per-element spread of 2^-12..2^12, zeros, negative zeros, FP32 subnormals.
// Weights (narrow = true) get row scales 2^-14..2^0, as trained weights have.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, bool specials = false,
                                 bool narrow = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const int e = narrow ? static_cast<int>(rng() % 15) - 14 : static_cast<int>(rng() % 61) - 30;
    const float row_scale = std::ldexp(1.0f, e);
    for (int64_t c = 0; c < cols; ++c) {
      float x = nd(rng) * row_scale * std::ldexp(1.0f, static_cast<int>(rng() % 25) - 12);
      switch (rng() % 40) {
        case 0: x = 0.0f; break;
        case 1: x = -0.0f; break;
        case 2: x = f32_from_bits(static_cast<uint32_t>(rng() & 0x807FFFFF)); break;
        case 3:
          if (specials) x = kNan;
          break;
        case 4:
          if (specials && rng() % 4 == 0) x = (rng() % 2 ? kInf : -kInf);
          break;
        default: break;
      }
      v[r * cols + c] = x;
    }
  }
  return v;
}

// A weight in one of the formats, owning its storage.
struct Weight {
  std::string name;
  WeightView view;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> codes, mx_scales;
  std::vector<float> fp8_scales;
};

enum class Kind { F32, BF16, MxE4M3Floor, MxE4M3RCeil, MxE5M2Floor, MxE5M2RCeil, Fp8Tensor, Fp8Block128 };
constexpr Kind kAllKinds[] = {Kind::F32,         Kind::BF16,        Kind::MxE4M3Floor, Kind::MxE4M3RCeil,
                              Kind::MxE5M2Floor, Kind::MxE5M2RCeil, Kind::Fp8Tensor,   Kind::Fp8Block128};

// Weights of the usual magnitudes (every MX/FP8 panel takes the fast decode)
// or, with `wide`, row scales over 2^-30..2^30 (some panels take the exact one).
Weight make_weight(Kind kind, int64_t n, int64_t k, uint32_t seed, bool specials = false, bool wide = false) {
  Weight w;
  const std::vector<float> src = random_matrix(n, k, seed, specials, !wide);
  w.view.n = n;
  w.view.k = k;
  switch (kind) {
    case Kind::F32:
      w.name = "f32";
      w.f32 = src;
      w.view.fmt = WFormat::F32;
      w.view.data = w.f32.data();
      break;
    case Kind::BF16:
      w.name = "bf16";
      for (float v : src) w.bf16.push_back(f32_to_bf16(v));
      w.view.fmt = WFormat::BF16;
      w.view.data = w.bf16.data();
      break;
    case Kind::MxE4M3Floor:
    case Kind::MxE4M3RCeil:
    case Kind::MxE5M2Floor:
    case Kind::MxE5M2RCeil: {
      const bool e4 = kind == Kind::MxE4M3Floor || kind == Kind::MxE4M3RCeil;
      const bool floor = kind == Kind::MxE4M3Floor || kind == Kind::MxE5M2Floor;
      MxConfig cfg;
      cfg.elem = e4 ? ElemType::E4M3 : ElemType::E5M2;
      cfg.rule = floor ? ScaleRule::Floor : ScaleRule::RCeil;
      w.name = std::string("mx ") + elem_traits(cfg.elem).name + " " + scale_rule_name(cfg.rule);
      w.codes.resize(src.size());
      w.mx_scales.resize(static_cast<size_t>(mx_num_scales(n, k, Axis::Row)));
      mx_quantize(src.data(), InType::F32, n, k, cfg, w.codes.data(), w.mx_scales.data());
      w.view.fmt = WFormat::MX;
      w.view.elem = cfg.elem;
      w.view.data = w.codes.data();
      w.view.mx_scales = w.mx_scales.data();
      break;
    }
    case Kind::Fp8Tensor:
    case Kind::Fp8Block128: {
      const Fp8Grid g = kind == Kind::Fp8Tensor ? Fp8Grid::per_tensor(n, k) : Fp8Grid::block128_weight();
      w.name = kind == Kind::Fp8Tensor ? "fp8 e4m3 per-tensor" : "fp8 e4m3 block128";
      w.codes.resize(src.size());
      w.fp8_scales.resize(static_cast<size_t>(fp8_num_scales(n, k, g)));
      fp8_quantize(src.data(), InType::F32, n, k, g, ElemType::E4M3, w.codes.data(), w.fp8_scales.data());
      w.view.fmt = WFormat::FP8;
      w.view.elem = ElemType::E4M3;
      w.view.fp8_grid = g;
      w.view.data = w.codes.data();
      w.view.fp8_scales = w.fp8_scales.data();
      break;
    }
  }
  return w;
}

std::string shape_name(const Weight& w, int64_t m) {
  return w.name + " M=" + std::to_string(m) + " N=" + std::to_string(w.view.n) + " K=" + std::to_string(w.view.k);
}

// gemm of the first m rows of x against the reference rows, on every backend.
void check_against_reference(const Weight& w, const std::vector<float>& x, const std::vector<float>& ref,
                             std::initializer_list<int64_t> ms, ThreadPool& pool) {
  const int64_t N = w.view.n;
  for (const Engine& eng : engines()) {
    const PairKernel pk = eng.pk;
    const Backend be = eng.be;
    const PackedWeight pw = PackedWeight::pack(w.view, {&pool, be, pk});
    for (int64_t m : ms) {
      std::vector<float> y(static_cast<size_t>(m * N + 1), 1234.5f);
      gemm(x.data(), m, pw, y.data(), {&pool, be, pk});
      const std::string what = std::string(eng.name) + " " + shape_name(w, m);
      expect_same_bits(y.data(), ref.data(), static_cast<size_t>(m * N), what);
      EXPECT_EQ(y[m * N], 1234.5f) << what << ": wrote past the end";
    }
  }
}

TEST(Gemm, MatchesReferenceBitwise) {
  ThreadPool pool(3);
  uint32_t seed = 1;
  const int64_t kMaxM = 64;
  for (Kind kind : kAllKinds)
    for (int64_t n : {1, 15, 16, 33, 100})
      for (int64_t k : {32, 64, 96, 544}) {
        ++seed;
        const Weight w = make_weight(kind, n, k, seed, false, /*wide=*/seed % 4 == 0);
        const std::vector<float> x = random_matrix(kMaxM, k, ++seed);
        std::vector<float> ref(static_cast<size_t>(kMaxM * n));
        gemm_reference(x.data(), kMaxM, w.view, ref.data());
        check_against_reference(w, x, ref, {0, 1, 2, 3, 4, 5, 6, 7, 17, 64}, pool);
      }
}

// Several row blocks (the AVX-512 backend blocks rows by 192 and K by 256).
TEST(Gemm, MatchesReferenceLargeM) {
  ThreadPool pool(3);
  uint32_t seed = 1000;
  for (Kind kind : kAllKinds) {
    const int64_t m = 401, n = 70, k = 800;
    const Weight w = make_weight(kind, n, k, ++seed);
    const std::vector<float> x = random_matrix(m, k, ++seed);
    std::vector<float> ref(static_cast<size_t>(m * n));
    gemm_reference(x.data(), m, w.view, ref.data());
    check_against_reference(w, x, ref, {m, 193, 13}, pool);
  }
}

// NaN and ±Inf in X and in W (F32/BF16 values, MX NaN scale bytes via blocks
// holding NaN/Inf) propagate as the reference's FMAs do.
TEST(Gemm, SpecialValuesMatchReference) {
  ThreadPool pool(3);
  uint32_t seed = 2000;
  for (Kind kind : kAllKinds)
    for (int64_t m : {1, 2, 5, 40}) {
      const int64_t n = 50, k = 320;
      const Weight w = make_weight(kind, n, k, ++seed, /*specials=*/true, /*wide=*/true);
      const std::vector<float> x = random_matrix(m, k, ++seed, /*specials=*/true);
      std::vector<float> ref(static_cast<size_t>(m * n));
      gemm_reference(x.data(), m, w.view, ref.data());
      check_against_reference(w, x, ref, {m}, pool);
    }
}

// Arbitrary code and scale bytes: every element code (NaN and Inf codes
// included) and every E8M0 scale (0, 0xFF, past the fast path's range) or
// FP32 scale (0, subnormal, huge, Inf, NaN, negative), for every element type.
TEST(Gemm, ArbitraryBytesMatchReference) {
  ThreadPool pool(3);
  std::mt19937 rng(77);
  const int64_t n = 70, k = 256;
  for (ElemType t : kAllElemTypes)
    for (WFormat fmt : {WFormat::MX, WFormat::FP8})
      for (int variant = 0; variant < 3; ++variant) {
        const uint8_t mask = static_cast<uint8_t>(elem_traits(t).num_codes() - 1);
        Weight w;
        w.name = std::string(wformat_name(fmt)) + " arbitrary " + elem_traits(t).name + " v" + std::to_string(variant);
        w.codes.resize(static_cast<size_t>(n * k));
        for (auto& c : w.codes) c = static_cast<uint8_t>(rng()) & mask;
        if (variant == 1)  // no NaN/Inf codes (the fast path), scales still arbitrary
          for (auto& c : w.codes)
            if (std::isnan(elem_decode(t, c)) || std::isinf(elem_decode(t, c))) c = 0x01;
        w.view = WeightView{fmt, n, k, w.codes.data()};
        w.view.elem = t;
        if (fmt == WFormat::MX) {
          w.mx_scales.resize(static_cast<size_t>(n * k / 32));
          for (auto& s : w.mx_scales) s = static_cast<uint8_t>(variant == 2 ? rng() : 100 + rng() % 40);
          w.view.mx_scales = w.mx_scales.data();
        } else {
          w.view.fp8_grid = Fp8Grid{7, 50};
          w.fp8_scales.resize(static_cast<size_t>(fp8_num_scales(n, k, w.view.fp8_grid)));
          const float menu[] = {0.0f, -0.0f, 1e-40f, 3e-38f, 1.0f, -2.5f, 1e20f, 3e38f, kInf, kNan};
          for (auto& s : w.fp8_scales)
            s = variant == 2 ? menu[rng() % 10] : std::ldexp(1.0f + (rng() % 1000) / 1000.0f, int(rng() % 40) - 30);
          w.view.fp8_scales = w.fp8_scales.data();
        }
        for (int64_t m : {1, 3, 20}) {
          const std::vector<float> x = random_matrix(m, k, static_cast<uint32_t>(rng()), variant == 2);
          std::vector<float> ref(static_cast<size_t>(m * n));
          gemm_reference(x.data(), m, w.view, ref.data());
          check_against_reference(w, x, ref, {m}, pool);
        }
      }
}

// Row r of a big call equals the same row computed alone, and at any position.
TEST(Gemm, BatchInvariance) {
  ThreadPool pool(3);
  uint32_t seed = 3000;
  for (Kind kind : kAllKinds) {
    const int64_t m = 300, n = 100, k = 544;
    const Weight w = make_weight(kind, n, k, ++seed);
    const std::vector<float> x = random_matrix(m, k, ++seed);
    for (const Engine& eng : engines()) {
      const PairKernel pk = eng.pk;
      const Backend be = eng.be;
      const Exec ex{&pool, be, pk};
      const PackedWeight pw = PackedWeight::pack(w.view, ex);
      std::vector<float> big(static_cast<size_t>(m * n));
      gemm(x.data(), m, pw, big.data(), ex);
      const std::string what = std::string(eng.name) + " " + w.name;
      for (int64_t r : {0, 1, 11, 12, 13, 191, 192, 299}) {
        std::vector<float> one(static_cast<size_t>(n));
        gemm(x.data() + r * k, 1, pw, one.data(), ex);
        expect_same_bits(one.data(), big.data() + r * n, n, what + " row " + std::to_string(r) + " alone");
      }
      // The rows in reverse order, and a window of rows at an odd offset.
      std::vector<float> xr(x.size()), yr(big.size());
      for (int64_t r = 0; r < m; ++r) std::memcpy(&xr[r * k], &x[(m - 1 - r) * k], k * sizeof(float));
      gemm(xr.data(), m, pw, yr.data(), ex);
      for (int64_t r = 0; r < m; ++r)
        expect_same_bits(yr.data() + r * n, big.data() + (m - 1 - r) * n, n, what + " reversed");
      for (int64_t len : {2, 7, 30}) {
        std::vector<float> yw(static_cast<size_t>(len * n));
        gemm(x.data() + 57 * k, len, pw, yw.data(), ex);
        expect_same_bits(yw.data(), big.data() + 57 * n, yw.size(), what + " window " + std::to_string(len));
      }
    }
  }
}

// The pair chain of BF16 and MX weights, odd element first: x = [1, 2^24, 1,
// -2^24] against ones gives (0 + 2^24) + 1 = 2^24, then (2^24 - 2^24) + 1 = 1;
// the sequential chain of FP32 weights gives ((1 + 2^24) + 1) - 2^24 = 0.
TEST(Gemm, PairChainTakesTheOddElementFirst) {
  const std::vector<float> x = {1.0f, 0x1p24f, 1.0f, -0x1p24f};
  const std::vector<float> ones = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<uint16_t> bf_ones(4, 0x3F80);
  for (const Engine& eng : engines()) {
    float y = -1.0f;
    gemm(x.data(), 1, PackedWeight::pack({WFormat::BF16, 1, 4, bf_ones.data()}), &y, {nullptr, eng.be, eng.pk});
    EXPECT_EQ(y, 1.0f) << eng.name << " bf16";
    gemm(x.data(), 1, PackedWeight::pack({WFormat::F32, 1, 4, ones.data()}), &y, {nullptr, eng.be, eng.pk});
    EXPECT_EQ(y, 0.0f) << eng.name << " f32";
  }
  float y = -1.0f;
  gemm_reference(x.data(), 1, {WFormat::BF16, 1, 4, bf_ones.data()}, &y);
  EXPECT_EQ(y, 1.0f);
}

// Odd K (the chain's zero pad), X that is not BF16 (rounded RNE first), and
// operands near BF16's smallest normal (products and sums that the chain
// flushes to zero, subnormal inputs treated as zeros), on every engine.
TEST(Gemm, PairChainOddKRoundingAndFlushing) {
  ThreadPool pool(2);
  std::mt19937 rng(909);
  for (int64_t k : {1, 3, 33, 257, 515})
    for (int tiny = 0; tiny < 2; ++tiny) {
      const int64_t n = 37, m = 19;
      std::vector<uint16_t> w(static_cast<size_t>(n * k));
      std::vector<float> x(static_cast<size_t>(m * k));
      for (auto& v : w) {
        const uint32_t e = tiny ? 60 + rng() % 11 : 100 + rng() % 50;  // tiny: products near 2^-126
        v = static_cast<uint16_t>((rng() & 0x8000u) | (e << 7) | (rng() & 0x7Fu));
        if (rng() % 16 == 0) v = static_cast<uint16_t>(rng() & 0x807Fu);  // BF16 subnormal or zero
      }
      for (auto& v : x) {
        const uint32_t e = tiny ? 40 + rng() % 21 : 100 + rng() % 50;
        v = f32_from_bits((rng() & 0x80000000u) | (e << 23) | (rng() & 0x7FFFFFu));
        if (rng() % 16 == 0) v = f32_from_bits(rng() & 0x807FFFFFu);  // FP32 subnormal
      }
      const WeightView view{WFormat::BF16, n, k, w.data()};
      std::vector<float> ref(static_cast<size_t>(m * n));
      gemm_reference(x.data(), m, view, ref.data());
      // Teeth: the same pair chain without DAZ/FTZ differs in the tiny case.
      int differ = 0;
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          float acc = 0.0f;
          for (int64_t i = 0; i < k; i += 2) {
            const float x1 = i + 1 < k ? detail::bf16_dot_round(x[r * k + i + 1]) : 0.0f;
            const float w1 = i + 1 < k ? f32_from_bits(uint32_t(w[j * k + i + 1]) << 16) : 0.0f;
            acc = std::fma(x1, w1, acc);
            acc = std::fma(detail::bf16_dot_round(x[r * k + i]), f32_from_bits(uint32_t(w[j * k + i]) << 16), acc);
          }
          differ += f32_bits(acc) != f32_bits(ref[r * n + j]);
        }
      if (tiny) {
        EXPECT_GT(differ, 0) << "K " << k << ": the tiny case must reach DAZ/FTZ";
      }
      for (const Engine& eng : engines()) {
        const PackedWeight pw = PackedWeight::pack(view, {&pool, eng.be, eng.pk});
        for (int64_t rows : {int64_t(1), int64_t(5), m}) {
          std::vector<float> y(static_cast<size_t>(rows * n));
          gemm(x.data(), rows, pw, y.data(), {&pool, eng.be, eng.pk});
          expect_same_bits(
              y.data(), ref.data(), y.size(),
              std::string(eng.name) + " K=" + std::to_string(k) + " M=" + std::to_string(rows) + (tiny ? " tiny" : ""));
        }
      }
    }
}

// X's rounding to BF16 where it shows: FP32 subnormals (DAZ: zero, though
// the weights are large enough that a kept one would change the sum) and NaNs
// whose payload sits in the low bits (quieted, not rounded into an infinity),
// on every engine, both paths.
TEST(Gemm, PairChainRoundsSubnormalAndNanX) {
  ThreadPool pool(2);
  std::mt19937 rng(77);
  const int64_t n = 40, k = 96, m = 13;
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = static_cast<uint16_t>((rng() & 0x8000u) | ((220 + rng() % 8) << 7) | (rng() & 0x7Fu));
  std::vector<float> x(static_cast<size_t>(m * k)), x_zero, x_min;
  for (auto& v : x) v = f32_from_bits((rng() & 0x80000000u) | ((1 + rng() % 3) << 23) | (rng() & 0x7FFFFFu));
  for (int64_t i = 0; i < m * k; i += 5) x[i] = f32_from_bits((rng() & 0x80000000u) | (1 + rng() % 0x7FFFFFu));
  x_zero = x_min = x;
  for (size_t i = 0; i < x.size(); i += 5) {
    x_zero[i] = std::copysign(0.0f, x[i]);
    x_min[i] = std::copysign(0x1p-126f, x[i]);
  }
  x[3 * k + 7] = f32_from_bits(0x7F800001u);  // row 3: a NaN with a 1 in the lowest payload bit
  x[8 * k + 2] = f32_from_bits(0xFF800101u);  // row 8
  const WeightView view{WFormat::BF16, n, k, w.data()};
  std::vector<float> ref(static_cast<size_t>(m * n)), ref_zero(ref.size()), ref_min(ref.size());
  gemm_reference(x.data(), m, view, ref.data());
  gemm_reference(x_zero.data(), m, view, ref_zero.data());
  gemm_reference(x_min.data(), m, view, ref_min.data());
  // Teeth: subnormal X counts as zero, yet a normal of that size would show.
  for (int64_t r : {int64_t(0), int64_t(5)}) {
    expect_same_bits(ref.data() + r * n, ref_zero.data() + r * n, n, "subnormal X is zero");
    EXPECT_NE(f32_bits(ref[r * n]), f32_bits(ref_min[r * n]));
  }
  EXPECT_TRUE(std::isnan(ref[3 * n]) && std::isnan(ref[8 * n + 1]));
  for (const Engine& eng : engines()) {
    const PackedWeight pw = PackedWeight::pack(view, {&pool, eng.be, eng.pk});
    for (int64_t rows : {int64_t(1), int64_t(2), int64_t(6), m}) {
      std::vector<float> y(static_cast<size_t>(rows * n));
      gemm(x.data() + (m - rows) * k, rows, pw, y.data(), {&pool, eng.be, eng.pk});
      expect_same_bits(y.data(), ref.data() + (m - rows) * n, y.size(),
                       std::string(eng.name) + " M=" + std::to_string(rows));
    }
  }
}

// The self-test ran and said one of its three things; where it passed, the
// VDPBF16PS engine is among those every test above compares.
TEST(Gemm, Bf16DotSelfTestVerdict) {
  const std::string& v = detail::bf16_dot_self_test();
  std::printf("VDPBF16PS self-test on this CPU: %s\n", v.c_str());
  EXPECT_TRUE(v == "passed" || v == "no AVX512_BF16" || v.rfind("failed: ", 0) == 0) << v;
  if (!cpu_features().avx512_bf16) {
    EXPECT_EQ(v, "no AVX512_BF16");
  }
  if (v != "passed") {
    EXPECT_EQ(resolve_pair_kernel(PairKernel::Auto, 1), PairKernel::Fma);
    EXPECT_EQ(resolve_pair_kernel(PairKernel::Auto, 512), PairKernel::Fma);
    EXPECT_EQ(resolve_pair_kernel(PairKernel::Dot, 1), PairKernel::Fma);
  }
}

// Auto takes, per shape class (rows per kernel call: the direct path up to
// kPairDirectRows, the blocked path above), one of the kernels that compute
// the contract, measured once per process; dot only where the self-test
// passed. Explicit requests are kept.
TEST(Gemm, AutoChoosesAPairKernelPerShapeClass) {
  const PairKernelChoice& c = pair_kernel_choice();
  std::printf("auto's pair kernels here: %s [%s]\n", pair_kernel_summary(PairKernel::Auto, true).c_str(),
              c.how.c_str());
  EXPECT_EQ(&pair_kernel_choice(), &c);
  ASSERT_EQ(c.classes.size(), 2u);
  EXPECT_EQ(c.classes[0].min_rows, 1);
  EXPECT_EQ(c.classes[0].max_rows, detail::kPairDirectRows);
  EXPECT_EQ(c.classes[1].min_rows, detail::kPairDirectRows + 1);
  EXPECT_EQ(c.classes[1].max_rows, 0);
  const bool dot_ok = detail::bf16_dot_self_test() == "passed";
  const char* env = std::getenv("MXRL_PAIR_KERNEL");
  for (const PairKernelClass& k : c.classes) {
    EXPECT_TRUE(k.kernel == PairKernel::Fma || (k.kernel == PairKernel::Dot && dot_ok)) << k.name;
    if (c.how == "measured") {
      EXPECT_TRUE(dot_ok && cpu_features().avx512);
      EXPECT_GT(k.dot_us, 0) << k.name;
      EXPECT_GT(k.fma_us, 0) << k.name;
      EXPECT_EQ(k.kernel, k.fma_us < k.dot_us ? PairKernel::Fma : PairKernel::Dot) << k.name;
    } else {
      EXPECT_TRUE(!cpu_features().avx512 || !dot_ok || (env && *env)) << c.how;
    }
  }
  for (int64_t rows : {1, 3, 6}) EXPECT_EQ(resolve_pair_kernel(PairKernel::Auto, rows), c.classes[0].kernel);
  for (int64_t rows : {7, 12, 192}) EXPECT_EQ(resolve_pair_kernel(PairKernel::Auto, rows), c.classes[1].kernel);
  for (int64_t rows : {1, 192}) {
    EXPECT_EQ(resolve_pair_kernel(PairKernel::Fma, rows), PairKernel::Fma);
    EXPECT_EQ(resolve_pair_kernel(PairKernel::Dot, rows), dot_ok ? PairKernel::Dot : PairKernel::Fma);
  }
  EXPECT_EQ(pair_kernel_summary(PairKernel::Fma), "fma");
  EXPECT_EQ(pair_kernel_summary(PairKernel::Auto).rfind("auto: ", 0), 0u) << pair_kernel_summary(PairKernel::Auto);
}

// GEMMs under Auto equal the reference bitwise in both classes: M = 1 and 6
// (direct), 7 and 48 (blocked), and M = 198 over 16 threads, whose row blocks
// are 24 rows but the last, of 6 (blocked and direct in one GEMM).
TEST(Gemm, AutoMatchesReferenceInBothShapeClasses) {
  ThreadPool pool(16);
  uint32_t seed = 3000;
  for (Kind kind : {Kind::BF16, Kind::MxE4M3RCeil, Kind::MxE5M2Floor}) {
    const int64_t m = 198, n = 70, k = 544;
    const Weight w = make_weight(kind, n, k, ++seed);
    const std::vector<float> x = random_matrix(m, k, ++seed);
    std::vector<float> ref(static_cast<size_t>(m * n));
    gemm_reference(x.data(), m, w.view, ref.data());
    const Exec exec{&pool, Backend::Auto, PairKernel::Auto};
    const PackedWeight pw = PackedWeight::pack(w.view, exec);
    for (int64_t rows : {1, 6, 7, 48, 198}) {
      std::vector<float> y(static_cast<size_t>(rows * n));
      gemm(x.data(), rows, pw, y.data(), exec);
      expect_same_bits(y.data(), ref.data(), y.size(), "auto " + shape_name(w, rows));
    }
  }
}

// (Small calls run on one thread; the shapes here are big enough to be split,
// M = 1 and 3 included.)
TEST(Gemm, ThreadCountInvariance) {
  uint32_t seed = 4000;
  const std::tuple<int64_t, int64_t, std::vector<int64_t>> shapes[] = {{200, 576, {4, 250}}, {2000, 2048, {1, 3}}};
  for (Kind kind : {Kind::F32, Kind::BF16, Kind::MxE4M3RCeil, Kind::Fp8Block128})
    for (const auto& [n, k, ms] : shapes) {
      const Weight w = make_weight(kind, n, k, ++seed);
      const PackedWeight pw1 = PackedWeight::pack(w.view);
      for (int64_t m : ms) {
        const std::vector<float> x = random_matrix(m, k, ++seed);
        std::vector<float> y1(static_cast<size_t>(m * n));
        gemm(x.data(), m, pw1, y1.data());
        for (int threads : {2, 3, 5}) {
          ThreadPool pool(threads);
          const PackedWeight pw = PackedWeight::pack(w.view, {&pool});
          std::vector<float> y(y1.size());
          gemm(x.data(), m, pw, y.data(), {&pool});
          expect_same_bits(y.data(), y1.data(), y.size(),
                           w.name + " M=" + std::to_string(m) + " threads " + std::to_string(threads));
        }
      }
    }
}

TEST(Gemm, WeightValueMatchesDequantizers) {
  std::mt19937 rng(9);
  const int64_t n = 40, k = 288;
  for (ElemType t : kAllElemTypes) {
    const uint8_t mask = static_cast<uint8_t>(elem_traits(t).num_codes() - 1);
    std::vector<uint8_t> codes(static_cast<size_t>(n * k)), mxs(static_cast<size_t>(n * k / 32));
    for (auto& c : codes) c = static_cast<uint8_t>(rng()) & mask;
    for (auto& s : mxs) s = static_cast<uint8_t>(rng());
    std::vector<float> deq(codes.size());
    mx_dequantize(codes.data(), mxs.data(), n, k, t, Axis::Row, deq.data(), {nullptr, Backend::Scalar});
    WeightView v{WFormat::MX, n, k, codes.data(), mxs.data()};
    v.elem = t;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        ASSERT_EQ(f32_bits(weight_value(v, i, j)), f32_bits(deq[i * k + j])) << "mx " << elem_traits(t).name;
    for (Fp8Grid g : {Fp8Grid::per_tensor(n, k), Fp8Grid::block128_weight(), Fp8Grid{3, 10}}) {
      std::vector<float> fs(static_cast<size_t>(fp8_num_scales(n, k, g)));
      for (auto& s : fs) s = std::ldexp(static_cast<float>(rng() % 1000 + 1), static_cast<int>(rng() % 60) - 40);
      fs[0] = kNan;
      fs[fs.size() - 1] = 0.0f;
      fp8_dequantize(codes.data(), fs.data(), n, k, g, t, deq.data(), {nullptr, Backend::Scalar});
      WeightView f{WFormat::FP8, n, k, codes.data(), nullptr, fs.data(), g, t};
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j)
          ASSERT_EQ(f32_bits(weight_value(f, i, j)), f32_bits(deq[i * k + j])) << "fp8 " << elem_traits(t).name;
    }
  }
  // F32 as is, BF16 widened.
  const float fv[] = {1.5f, -kInf, 3e-42f, -0.0f};
  const uint16_t bv[] = {0x3F80, 0xFF80, 0x0001, 0x8000};
  WeightView wf{WFormat::F32, 2, 2, fv}, wb{WFormat::BF16, 2, 2, bv};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(f32_bits(weight_value(wf, i / 2, i % 2)), f32_bits(fv[i]));
    EXPECT_EQ(f32_bits(weight_value(wb, i / 2, i % 2)), static_cast<uint32_t>(bv[i]) << 16);
  }
}

// Trained-weight magnitudes take the fast decode; NaN codes or scales out of
// its range take the exact one (both are checked bitwise above).
TEST(Gemm, FastDecodeSelection) {
  for (Kind kind : {Kind::MxE4M3Floor, Kind::MxE5M2RCeil, Kind::Fp8Tensor, Kind::Fp8Block128}) {
    const PackedWeight pw = PackedWeight::pack(make_weight(kind, 100, 256, 5).view);
    for (int64_t p = 0; p < pw.panels(); ++p) EXPECT_TRUE(pw.panel_fast(p)) << int(kind) << " panel " << p;
  }
  Weight w = make_weight(Kind::MxE4M3RCeil, 100, 256, 6);
  w.codes[40 * 256 + 3] = 0x7F;       // E4M3 NaN code in panel 1
  w.mx_scales[70 * 8 + 2] = 7 + 128;  // 2^(s - bias) not an FP32 normal: panel 2
  const PackedWeight pw = PackedWeight::pack(w.view);
  EXPECT_TRUE(pw.panel_fast(0));
  EXPECT_FALSE(pw.panel_fast(1));
  EXPECT_FALSE(pw.panel_fast(2));
  EXPECT_TRUE(pw.panel_fast(3));
}

// Which panels the pair kernels decode by table lookup: MX E4M3 fast panels
// without a NaN scale.
TEST(Gemm, LutDecodeSelection) {
  for (Kind kind : {Kind::MxE4M3Floor, Kind::MxE4M3RCeil}) {
    const PackedWeight pw = PackedWeight::pack(make_weight(kind, 100, 256, 5).view);
    for (int64_t p = 0; p < pw.panels(); ++p) EXPECT_TRUE(pw.panel_lut(p)) << int(kind) << " panel " << p;
  }
  for (Kind kind : {Kind::MxE5M2RCeil, Kind::Fp8Tensor, Kind::Fp8Block128, Kind::BF16}) {
    const PackedWeight pw = PackedWeight::pack(make_weight(kind, 100, 256, 5).view);
    for (int64_t p = 0; p < pw.panels(); ++p) EXPECT_FALSE(pw.panel_lut(p)) << int(kind) << " panel " << p;
  }
  Weight w = make_weight(Kind::MxE4M3RCeil, 100, 256, 6);
  w.mx_scales[40 * 8 + 3] = kE8M0Nan;  // panel 1: still fast, not a table panel
  w.codes[70 * 256 + 9] = 0xFF;        // panel 2: a NaN code, neither
  const PackedWeight pw = PackedWeight::pack(w.view);
  EXPECT_TRUE(pw.panel_lut(0));
  EXPECT_TRUE(pw.panel_fast(1));
  EXPECT_FALSE(pw.panel_lut(1));
  EXPECT_FALSE(pw.panel_fast(2));
  EXPECT_FALSE(pw.panel_lut(2));
  EXPECT_TRUE(pw.panel_lut(3));
  // The one-subtraction scaling (panel_lut_plain): no -0 code, no scale under 9.
  Weight v = make_weight(Kind::MxE4M3RCeil, 128, 256, 7);
  for (auto& c : v.codes)
    if (c == 0x80) c = 0;
  for (auto& sc : v.mx_scales) sc = std::max<uint8_t>(sc, 9);
  v.codes[40 * 256 + 3] = 0x80;  // panel 1: a -0 code
  v.mx_scales[70 * 8 + 2] = 8;   // panel 2: a scale of 8
  v.mx_scales[100 * 8 + 2] = 9;  // panel 3: 9 is enough
  const PackedWeight pv = PackedWeight::pack(v.view);
  for (int64_t p = 0; p < 4; ++p) EXPECT_TRUE(pv.panel_lut(p)) << p;
  EXPECT_TRUE(pv.panel_lut_plain(0));
  EXPECT_FALSE(pv.panel_lut_plain(1));
  EXPECT_FALSE(pv.panel_lut_plain(2));
  EXPECT_TRUE(pv.panel_lut_plain(3));
}

// The table-lookup decode against the reference and against the decode it
// replaces, bit for bit: every E4M3 code but NaN (subnormals, +-0, 448), scales
// over the whole range it takes (0 .. 134, values far below BF16's normal range
// included) beside panels that fall back (a NaN scale, a scale over 134), X
// with zeros and subnormals; direct (M <= 6) and blocked paths, both pair kernels.
// Variants 3 and 4 have no -0 code, so that their panels take the
// one-subtraction scaling (panel_lut_plain): scales down to its bound of 9
// with the smallest negative codes, and in variant 4 one panel with a scale
// of 8 beside them (not plain: one subtraction would borrow from the sign).
TEST(Gemm, LutDecodeMatchesReference) {
  if (!detail::pair_lut_enabled()) GTEST_SKIP() << "no AVX512_VBMI: the table-lookup decode does not run here";
  ThreadPool pool(2);
  std::mt19937 rng(4242);
  const int64_t n = 160, k = 320;
  for (int variant = 0; variant < 5; ++variant) {
    Weight w;
    w.name = "mx e4m3 lut v" + std::to_string(variant);
    w.codes.resize(static_cast<size_t>(n * k));
    for (auto& c : w.codes) {
      c = static_cast<uint8_t>(rng());
      if ((c & 0x7F) == 0x7F) c ^= 0x01;
      if (rng() % 8 == 0) c = static_cast<uint8_t>(rng() % 2 ? 0x80 | (rng() % 8) : rng() % 8);  // zeros, subnormals
      if (variant >= 3 && c == 0x80) c = static_cast<uint8_t>(0x81 + rng() % 2);
    }
    w.mx_scales.resize(static_cast<size_t>(n * k / 32));
    const uint8_t edge[] = {0, 1, 2, 9, 10, 11, 17, 18, 19, 127, 133, 134};
    const uint8_t plain_edge[] = {9, 9, 9, 10, 11, 17, 18, 127, 133, 134};
    for (auto& s : w.mx_scales)
      s = variant == 0   ? static_cast<uint8_t>(110 + rng() % 25)
          : variant == 1 ? edge[rng() % 12]
          : variant == 2 ? static_cast<uint8_t>(rng() % 135)
                         : plain_edge[rng() % 10];
    if (variant == 4) {  // panel 1: not plain, a negative code there that one subtraction would get wrong
      w.mx_scales[(1 * 32 + 4) * (k / 32) + 2] = 8;
      w.codes[(1 * 32 + 4) * k + 2 * 32 + 5] = 0x81;
    }
    if (variant == 2) {
      w.mx_scales[(2 * 32 + 5) * (k / 32) + 3] = kE8M0Nan;  // panel 2 falls back (NaN scale)
      w.mx_scales[(3 * 32 + 7) * (k / 32) + 1] = 135;       // panel 3 falls back (generic)
    }
    w.view = WeightView{WFormat::MX, n, k, w.codes.data()};
    w.view.elem = ElemType::E4M3;
    w.view.mx_scales = w.mx_scales.data();
    const PackedWeight pw = PackedWeight::pack(w.view);
    EXPECT_EQ(pw.panel_lut(2), variant != 2);
    EXPECT_EQ(pw.panel_lut(3), variant != 2);
    EXPECT_TRUE(pw.panel_lut(0));
    for (int64_t p = 0; p < pw.panels(); ++p)
      EXPECT_EQ(pw.panel_lut_plain(p), variant == 3 || (variant == 4 && p != 1)) << w.name << " panel " << p;
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 13, 40}) {
      // NaN and Inf in X only at m = 13: one in 40 elements makes every output NaN, blind to the weights.
      const std::vector<float> x = random_matrix(m, k, static_cast<uint32_t>(rng()), m == 13, variant == 0);
      std::vector<float> ref(static_cast<size_t>(m * n));
      gemm_reference(x.data(), m, w.view, ref.data());
      for (const Engine& eng : engines()) {
        if (eng.be == Backend::Scalar) continue;
        for (bool lut : {true, false}) {
          detail::set_pair_lut_enabled(lut);
          std::vector<float> y(static_cast<size_t>(m * n));
          gemm(x.data(), m, pw, y.data(), {&pool, eng.be, eng.pk});
          expect_same_bits(y.data(), ref.data(), y.size(),
                           std::string(eng.name) + (lut ? " lut " : " no lut ") + shape_name(w, m));
        }
        detail::set_pair_lut_enabled(true);
      }
    }
  }
}

TEST(Gemm, PackedWeightKeepsStorageFormat) {
  const Weight b = make_weight(Kind::BF16, 64, 1024, 1), m = make_weight(Kind::MxE4M3RCeil, 64, 1024, 2),
               f = make_weight(Kind::F32, 64, 1024, 3);
  const PackedWeight pb = PackedWeight::pack(b.view), pf = PackedWeight::pack(f.view);
  PackedWeight pm = PackedWeight::pack(m.view);
  EXPECT_EQ(pb.format(), WFormat::BF16);
  EXPECT_EQ(pm.format(), WFormat::MX);
  EXPECT_EQ(pb.n(), 64);
  EXPECT_EQ(pb.k(), 1024);
  EXPECT_LE(pb.bytes(), 64u * 1024 * 2 + 256);
  EXPECT_LE(pm.bytes(), 64u * 1024 * 33 / 32 + 256);
  EXPECT_GE(pf.bytes(), 64u * 1024 * 4);
  PackedWeight moved = std::move(pm);  // movable
  EXPECT_EQ(moved.n(), 64);
}

// The panel layout of gemm.h, element by element, for element codes and BF16
// pairs: full panels (packed 16 codes or 8 pairs of k at a time in registers)
// and a partial one (the scalar loop), K a multiple of 16 or 8 or not (FP8,
// BF16), one panel or several.
TEST(Gemm, PackedPanelsFollowTheLayout) {
  uint32_t seed = 500;
  for (Kind kind : {Kind::MxE4M3RCeil, Kind::Fp8Tensor, Kind::BF16})
    for (int64_t n : {32, 70})
      for (int64_t k : {32, 1024, 40, 7, 45}) {
        if (kind == Kind::MxE4M3RCeil && k % 32 != 0) continue;
        const Weight w = make_weight(kind, n, k, ++seed, /*specials=*/true);
        ThreadPool pool(2);
        const PackedWeight pw = PackedWeight::pack(w.view, {&pool});
        for (int64_t p = 0; p < pw.panels(); ++p) {
          const auto* d8 = static_cast<const uint8_t*>(pw.panel_data(p));
          const auto* d16 = static_cast<const uint16_t*>(pw.panel_data(p));
          for (int64_t j = 0; j < PackedWeight::kPanel; ++j) {
            const int64_t pos = j < 16 ? 2 * j : 2 * (j - 16) + 1, row = p * PackedWeight::kPanel + j;
            for (int64_t kk = 0; kk < k; ++kk) {
              const int64_t at = kk * PackedWeight::kPanel + pos;
              if (kind == Kind::BF16)
                ASSERT_EQ(d16[at], row < n ? w.bf16[row * k + kk] : 0)
                    << w.name << " n " << n << " k " << k << " row " << row << " k " << kk;
              else
                ASSERT_EQ(d8[at], row < n ? w.codes[row * k + kk] : 0)
                    << w.name << " n " << n << " k " << k << " row " << row << " k " << kk;
            }
          }
        }
      }
}

TEST(Gemm, EdgeShapes) {
  for (const Engine& eng : engines()) {
    const PairKernel pk = eng.pk;
    const Backend be = eng.be;
    // K = 0: zeros. M = 0: Y untouched. N = 0: nothing.
    const float dummy = 0;
    const PackedWeight k0 = PackedWeight::pack({WFormat::F32, 3, 0, nullptr}, {nullptr, be, pk});
    std::vector<float> y(6, 7.0f);
    gemm(&dummy, 2, k0, y.data(), {nullptr, be, pk});
    for (float v : y) EXPECT_EQ(f32_bits(v), 0u);
    const PackedWeight mx = PackedWeight::pack(make_weight(Kind::MxE4M3RCeil, 5, 64, 3).view, {nullptr, be, pk});
    y.assign(6, 7.0f);
    gemm(nullptr, 0, mx, y.data(), {nullptr, be, pk});
    for (float v : y) EXPECT_EQ(v, 7.0f);
    const PackedWeight n0 = PackedWeight::pack({WFormat::MX, 0, 64, nullptr}, {nullptr, be, pk});
    gemm(&dummy, 1, n0, nullptr, {nullptr, be, pk});
    EXPECT_EQ(n0.panels(), 0);
  }
}

TEST(Gemm, Errors) {
  std::vector<uint8_t> codes(4 * 48), scales(16, 127);
  WeightView v{WFormat::MX, 4, 48, codes.data(), scales.data()};
  EXPECT_THROW(PackedWeight::pack(v), Error);
  std::vector<float> x(48), y(4);
  EXPECT_THROW(gemm_reference(x.data(), 1, v, y.data()), Error);
  EXPECT_THROW(PackedWeight::pack(WeightView{WFormat::MX, 4, 64, codes.data(), nullptr}), Error);
  EXPECT_THROW(PackedWeight::pack(WeightView{WFormat::F32, -1, 4, x.data()}), Error);
  EXPECT_THROW(PackedWeight::pack(WeightView{WFormat::BF16, 2, 2, nullptr}), Error);
  WeightView f{WFormat::FP8, 4, 48, codes.data(), nullptr, nullptr, Fp8Grid{1, 1}};
  EXPECT_THROW(PackedWeight::pack(f), Error);  // no scales
  std::vector<float> fs(4 * 48, 1.0f);
  f.fp8_scales = fs.data();
  f.fp8_grid = Fp8Grid{0, 1};
  EXPECT_THROW(PackedWeight::pack(f), Error);
  // A code wider than the element type.
  std::vector<uint8_t> wide(4 * 64, 0);
  wide[70] = 0x10;
  WeightView e2{WFormat::MX, 4, 64, wide.data(), scales.data()};
  e2.elem = ElemType::E2M1;
  try {
    PackedWeight::pack(e2);
    ADD_FAILURE() << "no error for a 5-bit code in e2m1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 6]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxrl

namespace mxrl {
namespace {
// The foreign reduction order (not the contract): one split is the
// reference's chain bit for bit (FP32 and FP8 weights; for BF16 and MX ones the
// contract's pair chain is yet another order); four partial sums are another rounding of
// the same exact products, close to the reference but not always equal.
TEST(GemmSplitK, OneSplitIsTheReferenceFourAreAnotherOrder) {
  uint32_t seed = 900;
  int64_t differ = 0, total = 0;
  for (Kind kind : kAllKinds) {
    const int64_t n = 33, k = 544, m = 9;
    const Weight w = make_weight(kind, n, k, ++seed);
    std::vector<float> x = random_matrix(m, k, ++seed);
    for (float& v : x) v = detail::bf16_dot_round(v);  // BF16 values, as the linears feed
    std::vector<float> ref(m * n), one(m * n), four(m * n);
    gemm_reference(x.data(), m, w.view, ref.data());
    gemm_split_k(x.data(), m, w.view, one.data(), 1);
    gemm_split_k(x.data(), m, w.view, four.data(), 4);
    if (!detail::pair_contract(w.view.fmt)) {  // the pair chain is itself another order
      EXPECT_EQ(std::memcmp(ref.data(), one.data(), ref.size() * sizeof(float)), 0) << w.name;
    }
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double mag = 0;  // sum of |x w|: both orders are within K u of it
        for (int64_t kk = 0; kk < k; ++kk) mag += std::fabs(double(x[r * k + kk]) * weight_value(w.view, j, kk));
        const size_t i = static_cast<size_t>(r * n + j);
        differ += ref[i] != four[i];
        ++total;
        EXPECT_NEAR(four[i], ref[i], 1e-4 * mag + 1e-30) << w.name << " [" << i << "]";
      }
  }
  EXPECT_GT(differ, total / 10) << "split-K must round differently from the sequential chain";
  const Weight w = make_weight(Kind::F32, 2, 32, 1);
  const std::vector<float> x = random_matrix(1, 32, 2);
  std::vector<float> y(2);
  EXPECT_THROW(gemm_split_k(x.data(), 1, w.view, y.data(), 0), Error);
}
}  // namespace
}  // namespace mxrl

namespace mxrl {
namespace {
// The AMX pair kernel (PairKernel::Amx): asked for, never chosen by Auto; not
// the pair chain, so it is tested for invariance (bitwise, against itself)
// and for a tolerance against the reference. Skipped where AMX is not usable.
Exec amx(ThreadPool* pool = nullptr) { return {pool, Backend::Auto, PairKernel::Amx}; }
#define MXRL_SKIP_WITHOUT_AMX() \
  if (!detail::amx_available()) GTEST_SKIP() << "no AMX-BF16 here (or the OS refused the tile state)"

TEST(GemmAmx, OnlyWhenAskedFor) {
  for (int64_t rows : {1, 64}) {
    EXPECT_NE(resolve_pair_kernel(PairKernel::Auto, rows), PairKernel::Amx);
    EXPECT_EQ(resolve_pair_kernel(PairKernel::Amx, rows) == PairKernel::Amx, detail::amx_available());
    if (!detail::amx_available()) {
      EXPECT_EQ(resolve_pair_kernel(PairKernel::Amx, rows), resolve_pair_kernel(PairKernel::Auto, rows));
    }
  }
  EXPECT_STREQ(pair_kernel_name(PairKernel::Amx), "amx");
}

// Every output depends only on its X row, its W column and K: the full X in
// one call equals each row alone (M = 1), one thread equals two, and the rows
// permuted give the same rows permuted. K not a multiple of 32 (BF16), N not
// a multiple of 32, M across the 16-row tiles, the 32-row tile pairs and the
// 256-row blocks.
TEST(GemmAmx, BatchInvariance) {
  MXRL_SKIP_WITHOUT_AMX();
  ThreadPool pool1(1), pool2(2);
  uint32_t seed = 7000;
  struct Shape {
    Kind kind;
    int64_t n, k;
  };
  const Shape shapes[] = {{Kind::BF16, 33, 50},        {Kind::BF16, 100, 544},        {Kind::BF16, 70, 1001},
                          {Kind::MxE4M3RCeil, 33, 64}, {Kind::MxE4M3RCeil, 100, 544}, {Kind::MxE4M3Floor, 45, 1024},
                          {Kind::MxE5M2RCeil, 17, 96}};
  for (const Shape& s : shapes) {
    ++seed;
    const Weight w = make_weight(s.kind, s.n, s.k, seed, false, /*wide=*/seed % 3 == 0);
    const PackedWeight pw = PackedWeight::pack(w.view);
    const int64_t n = s.n, k = s.k;
    for (int64_t m : {1, 3, 16, 17, 33, 100, 300}) {
      const std::vector<float> x = random_matrix(m, k, ++seed);
      const std::string what = "amx " + shape_name(w, m);
      std::vector<float> y2(static_cast<size_t>(m * n)), y1(y2.size()), yp(y2.size()), xp(x.size());
      gemm(x.data(), m, pw, y2.data(), amx(&pool2));
      gemm(x.data(), m, pw, y1.data(), amx(&pool1));
      expect_same_bits(y1.data(), y2.data(), y2.size(), what + " 1 vs 2 threads");
      for (int64_t r = 0; r < m; ++r) {
        std::vector<float> one(static_cast<size_t>(n));
        gemm(x.data() + r * k, 1, pw, one.data(), amx());
        expect_same_bits(one.data(), y2.data() + r * n, static_cast<size_t>(n),
                         what + " row " + std::to_string(r) + " alone");
      }
      // A fixed permutation: row r goes to (r * 7 + 3) mod m when 7 is coprime with m, else reversed.
      std::vector<int64_t> to(static_cast<size_t>(m));
      for (int64_t r = 0; r < m; ++r) to[r] = m % 7 != 0 ? (r * 7 + 3) % m : m - 1 - r;
      for (int64_t r = 0; r < m; ++r) std::memcpy(&xp[to[r] * k], &x[r * k], static_cast<size_t>(k) * sizeof(float));
      gemm(xp.data(), m, pw, yp.data(), amx(&pool2));
      for (int64_t r = 0; r < m; ++r)
        expect_same_bits(yp.data() + to[r] * n, y2.data() + r * n, static_cast<size_t>(n), what + " permuted");
    }
  }
}

// Against the reference pair chain: both are sums of the same exact products
// (BF16 x BF16 is exact in FP32) rounded to FP32 in some order, each within
// K u sum_k |x_k w_k| of the exact sum (u = 2^-24, any summation order of at
// most K roundings), plus what flushing subnormal partial results to zero can
// lose (below 2^-126 per step). So |y_amx - y_ref| <= 2 K u sum|x w| + 2 K
// 2^-126 is a bound that holds whatever order TDPBF16PS adds in. Tighter, and
// what the test really leans on: against the exact sum (in double), AMX's
// largest error in units of u sum|x w| is no worse than the sequential
// reference chain's own (its partial sums over 32-wide steps are shorter
// chains), and small in absolute terms.
TEST(GemmAmx, ToleranceAgainstReference) {
  MXRL_SKIP_WITHOUT_AMX();
  ThreadPool pool(2);
  uint32_t seed = 8000;
  int64_t differ = 0, total = 0;
  for (Kind kind : {Kind::BF16, Kind::MxE4M3RCeil, Kind::MxE4M3Floor, Kind::MxE5M2RCeil})
    for (int64_t k : {32, 96, 544, 2048}) {
      const int64_t n = 40, m = 21;
      const Weight w = make_weight(kind, n, k, ++seed);
      const std::vector<float> x = random_matrix(m, k, ++seed);
      std::vector<float> ref(static_cast<size_t>(m * n)), y(ref.size());
      gemm_reference(x.data(), m, w.view, ref.data());
      gemm(x.data(), m, PackedWeight::pack(w.view), y.data(), amx(&pool));
      double worst_amx = 0, worst_ref = 0;  // |y - exact| / (u sum|x w|)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double mag = 0, exact = 0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const double p =
                double(detail::bf16_dot_round(x[r * k + kk])) * detail::bf16_dot_daz(weight_value(w.view, j, kk));
            mag += std::fabs(p);
            exact += p;
          }
          const size_t i = static_cast<size_t>(r * n + j);
          const double u = 0x1p-24;
          EXPECT_LE(std::fabs(double(y[i]) - double(ref[i])), 2.0 * k * u * mag + 2.0 * k * 0x1p-126)
              << w.name << " K=" << k << " [" << i << "]";
          if (mag > 0x1p-100) {
            worst_amx = std::max(worst_amx, std::fabs(y[i] - exact) / (u * mag));
            worst_ref = std::max(worst_ref, std::fabs(ref[i] - exact) / (u * mag));
          }
          differ += f32_bits(y[i]) != f32_bits(ref[i]);
          ++total;
        }
      std::printf("AMX %s K=%lld: largest error vs exact %.2f u sum|x w| (reference chain %.2f)\n", w.name.c_str(),
                  static_cast<long long>(k), worst_amx, worst_ref);
      EXPECT_LE(worst_amx, std::max(2.0, worst_ref)) << w.name << " K=" << k;
    }
  std::printf("AMX vs reference: %lld of %lld outputs differ\n", static_cast<long long>(differ),
              static_cast<long long>(total));
}

// What TDPBF16PS does with subnormals, measured through the GEMM (K = 2, one
// pair; X exact in BF16): a BF16 subnormal weight counts as zero (DAZ), a
// product or sum below 2^-126 becomes a signed zero (FTZ), as the pair chain
// (and VDPBF16PS) does; normal results are exact. NaN and infinities come out
// as the reference says, NaN canonical.
TEST(GemmAmx, FlushesLikeThePairChain) {
  MXRL_SKIP_WITHOUT_AMX();
  struct Case {
    float x0, x1;
    uint16_t w0, w1;
  };
  const Case cases[] = {
      {0x1p100f, 0.0f, 0x0001, 0x0000},           // subnormal weight 2^-133: x w = 2^-33 unless DAZ
      {0x1p-70f, 0.0f, 0x21C0 /*1.5*2^-60*/, 0},  // product 1.5 * 2^-130: subnormal
      {0x1p-63f, -0x1p-63f, 0x0080 /*2^-126*/ + (1u << 14), 0x3f00 /*0.5*/},  // normal product pieces
      {0x1p-20f, 0x1p-20f, 0x1F80 /*2^-64*/, 0x9F80 /*-2^-64*/},              // products cancel exactly: +0
      {1.0f, 0x1p-126f, 0x0080 /*2^-126*/, 0xBF00 /*-0.5*/},                  // 2^-126 - 2^-127: subnormal sum
      {NAN, 1.0f, 0x3F80, 0x3F80},
      {INFINITY, 1.0f, 0x3F80, 0x3F80},
      {INFINITY, 1.0f, 0x3F80, 0xFF80},
  };
  for (const Case& c : cases) {
    const float x[2] = {c.x0, c.x1};
    const uint16_t wv[2] = {c.w0, c.w1};
    const WeightView view{WFormat::BF16, 1, 2, wv};
    float ref = -1, y = -1;
    gemm_reference(x, 1, view, &ref);
    gemm(x, 1, PackedWeight::pack(view), &y, amx());
    EXPECT_EQ(f32_bits(y), f32_bits(ref)) << "x " << c.x0 << ", " << c.x1 << " w 0x" << std::hex << c.w0 << ", 0x"
                                          << c.w1 << ": amx " << y << " reference " << ref;
  }
}
}  // namespace
}  // namespace mxrl

namespace mxrl {
namespace {

// pack_transposed of W^T is pack of W, byte for byte (fingerprints cover the
// panels, scales and fast flags), including special codes, an unfoldable
// scale, N and K off the panel and block sizes; and it refuses what it must.
TEST(Gemm, PackTransposedEqualsPackOfTheTranspose) {
  uint32_t seed = 300;
  for (Kind kind : {Kind::F32, Kind::BF16, Kind::MxE4M3RCeil, Kind::MxE5M2Floor})
    for (int64_t n : {1, 31, 33, 70})
      for (int64_t k : {32, 96, 5, 33}) {
        const bool mx = kind != Kind::F32 && kind != Kind::BF16;
        if (mx && k % 32 != 0) continue;
        Weight w = make_weight(kind, n, k, ++seed, /*specials=*/true, /*wide=*/true);
        if (mx && n > 40) {
          w.codes[40 * k + 1] = 0x7F;            // a NaN code (E4M3 and E5M2) in panel 1
          w.mx_scales[35 * (k / 32)] = 7 + 128;  // a scale the fast decode cannot fold, panel 1
        }
        // W^T, row-major [k][n]; MX scales as column blocks [k/32][n].
        std::vector<float> tf;
        std::vector<uint16_t> tb;
        std::vector<uint8_t> tc, ts;
        WeightView t = w.view;
        t.n = k, t.k = n;
        if (kind == Kind::F32) {
          for (int64_t r = 0; r < k; ++r)
            for (int64_t c = 0; c < n; ++c) tf.push_back(w.f32[c * k + r]);
          t.data = tf.data();
        } else if (kind == Kind::BF16) {
          for (int64_t r = 0; r < k; ++r)
            for (int64_t c = 0; c < n; ++c) tb.push_back(w.bf16[c * k + r]);
          t.data = tb.data();
        } else {
          for (int64_t r = 0; r < k; ++r)
            for (int64_t c = 0; c < n; ++c) tc.push_back(w.codes[c * k + r]);
          for (int64_t g = 0; g < k / 32; ++g)
            for (int64_t c = 0; c < n; ++c) ts.push_back(w.mx_scales[c * (k / 32) + g]);
          t.data = tc.data(), t.mx_scales = ts.data();
        }
        ThreadPool pool(2);
        const PackedWeight a = PackedWeight::pack(w.view), b = PackedWeight::pack_transposed(t, {&pool});
        EXPECT_EQ(a.fingerprint(), b.fingerprint()) << w.name << " n " << n << " k " << k;
        ASSERT_EQ(a.panels(), b.panels());
        for (int64_t p = 0; p < a.panels(); ++p) EXPECT_EQ(a.panel_fast(p), b.panel_fast(p)) << w.name << " " << p;
        if (mx && n > 40) {
          EXPECT_FALSE(b.panel_fast(1));
        }
      }
  Weight m = make_weight(Kind::MxE4M3RCeil, 8, 32, 1);
  WeightView t = m.view;
  t.n = 33, t.k = 8;  // W^T rows (W's K) not a multiple of 32
  EXPECT_THROW(PackedWeight::pack_transposed(t), Error);
  t.fmt = WFormat::FP8;
  EXPECT_THROW(PackedWeight::pack_transposed(t), Error);
  Weight f6 = make_weight(Kind::MxE4M3RCeil, 4, 32, 2);
  WeightView v6 = f6.view;
  v6.elem = ElemType::E3M2;  // 6-bit codes: 0x80 does not fit
  std::vector<uint8_t> c6(32 * 4), s6(4);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c = 0; c < 4; ++c) c6[r * 4 + c] = f6.codes[c * 32 + r] & 0x3F;  // valid 6-bit codes
  for (int64_t c = 0; c < 4; ++c) s6[c] = f6.mx_scales[c];
  c6[7 * 4 + 3] = 0x80;  // W[3][7]
  WeightView t6 = v6;
  t6.n = 32, t6.k = 4, t6.data = c6.data(), t6.mx_scales = s6.data();
  try {
    PackedWeight::pack_transposed(t6);
    ADD_FAILURE() << "a 6-bit code of 0x80 was packed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0x80 at [3, 7]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mxrl
