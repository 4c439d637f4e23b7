// GEMM front end: weight values, packing, backend dispatch and the split of
// the work over threads (rows and column panels, never K).
#include "kernels/gemm/gemm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <xxhash.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstdio>

#include "util/cpu.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

const char* wformat_name(WFormat f) {
  switch (f) {
    case WFormat::F32: return "f32";
    case WFormat::BF16: return "bf16";
    case WFormat::MX: return "mx";
    case WFormat::FP8: return "fp8";
  }
  return "?";
}

namespace detail {
#if defined(__x86_64__)
namespace {
const GemmKernels& pair_table(PairKernel k) { return k == PairKernel::Dot ? kGemmAvx512Dot : kGemmAvx512; }

// Auto with classes that chose differently: each call (one row block) runs
// under its class's kernel. The two tables block rows alike, and both compute
// the contract's bits, so a GEMM may mix them.
void run_pairs_by_class(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0,
                        int64_t p1) {
  pair_table(resolve_pair_kernel(PairKernel::Auto, m1 - m0)).run(x, w, y, m0, m1, p0, p1);
}
}  // namespace
#endif

const GemmKernels& gemm_kernels(const Exec& exec, WFormat f) {
  // On AVX2 every format runs kGemmAvx2 (its pair chain is the FMA one;
  // exec.pair_kernel is for AVX-512).
  const GemmKernels& t = backend_table(exec.backend, kGemmScalar, MXRL_AVX2(kGemmAvx2), MXRL_AVX512(kGemmAvx512));
#if defined(__x86_64__)
  // The pair chain's kernel: the AVX-512 table's FMA path, VDPBF16PS, or AMX
  // tiles (which also block rows by its 16-row tiles; each output is the same
  // in any block: the blocking only sets how work is shared).
  if (&t == &kGemmAvx512 && pair_contract(f)) {
    PairKernel k = exec.pair_kernel;
    if (k == PairKernel::Amx) {
      if (amx_available()) return kGemmAmx;
      k = PairKernel::Auto;
    }
    if (k == PairKernel::Auto) {
      const std::vector<PairKernelClass>& c = pair_kernel_choice().classes;
      if (c[0].kernel == c[1].kernel) return pair_table(c[0].kernel);
      static const GemmKernels by_class = {run_pairs_by_class, kGemmAvx512.block_rows, kGemmAvx512.tile_rows};
      return by_class;
    }
    return pair_table(resolve_pair_kernel(k, 1));
  }
#endif
  return t;
}

float bf16_dot_daz(float x) {
  const uint32_t b = f32_bits(x);
  return (b & 0x7F800000u) == 0 ? f32_from_bits(b & 0x80000000u) : x;
}

float bf16_dot_round(float x) {
  const uint32_t b = f32_bits(x);
  if ((b & 0x7F800000u) == 0) return f32_from_bits(b & 0x80000000u);
  if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0) return f32_from_bits((b | 0x00400000u) & 0xFFFF0000u);
  return f32_from_bits((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
}

float bf16_dot_step(float acc, float x, float w) {
  return bf16_dot_daz(std::fma(bf16_dot_daz(x), bf16_dot_daz(w), bf16_dot_daz(acc)));
}

namespace {
uint16_t bf16_hi(float v) { return static_cast<uint16_t>(f32_bits(v) >> 16); }

std::string run_self_test() {
#if defined(__x86_64__)
  if (!cpu_features().avx512_bf16) return "no AVX512_BF16";
  // 16 lanes per vector: fixed cases first (pair order, denormal operands,
  // accumulators and results, NaN, infinities), then pseudo-random BF16 values
  // over the whole exponent range.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  auto rnd_bf16 = [&](int lo_exp, int hi_exp) {
    const uint64_t r = next();
    const uint32_t e = static_cast<uint32_t>(lo_exp + static_cast<int>(r % static_cast<uint64_t>(hi_exp - lo_exp + 1)));
    return static_cast<uint16_t>(((r >> 20) & 0x8000u) | (e << 7) | ((r >> 32) & 0x7Fu));
  };
  const float fixed_x[][4] = {
      // {acc, x0, w1, x1} with w0 = 1: the even element's product is x0, the odd one's x1 * w1.
      // Order-sensitive sums: (acc + p1) + p0 differs from (acc + p0) + p1.
      {0x1p25f, 1.0f, 1.0f, -0x1p25f},
      {-0x1p24f, -1.0f, 1.0f, 0x1p24f},
      {0x1p24f, 1.0f, 1.0f, -0x1p24f},
      {0.0f, 0x1p-130f, 1.0f, 0x1p-126f},  // denormal operand
      {0x1p-130f, 1.0f, 0x1p-120f, 0.0f},
      {0x1p-126f, -0x1p-127f, 1.0f, 0.0f},  // denormal result
      {0.0f, 0x1p-70f, 0x1p-60f, 0.0f},
      {NAN, 1.0f, 1.0f, 1.0f},
      {INFINITY, -INFINITY, 1.0f, 1.0f},
      {1.0f, INFINITY, 0.0f, 1.0f},
      {-0.0f, -0.0f, 1.0f, 0.0f},
      {3.0f, 1.00390625f, 1.00390625f, -1.0f},
      {0x1.000002p0f, 0x1p-24f, 1.0f, 0x1p-24f},
      {-0x1p-126f, 0x1.8p-127f, 1.0f, 0.0f},
      {1e30f, 1e30f, 1e10f, -1.0f},
      {0x1p-126f, -0x1p-126f, 1.0f, 0x1p-140f},
  };
  std::string failure;
  for (int round = 0; round < 64 && failure.empty(); ++round) {
    alignas(64) float acc[16], ref[16];
    alignas(64) uint32_t a[16], b[16];
    for (int l = 0; l < 16; ++l) {
      float ac, x0, w0, x1, w1;
      if (round == 0) {
        ac = fixed_x[l][0], x0 = fixed_x[l][1], w0 = 1.0f, x1 = fixed_x[l][3], w1 = fixed_x[l][2];
        x0 = f32_from_bits(f32_bits(x0) & 0xFFFF0000u), x1 = f32_from_bits(f32_bits(x1) & 0xFFFF0000u);
        w1 = f32_from_bits(f32_bits(w1) & 0xFFFF0000u);
      } else {
        const int lo = round % 4 == 0 ? 0 : round % 4 == 1 ? 1 : 60, hi = round % 4 == 1 ? 8 : 195;
        x0 = bf16_to_f32(rnd_bf16(lo, hi)), x1 = bf16_to_f32(rnd_bf16(lo, hi));
        w0 = bf16_to_f32(rnd_bf16(lo, hi)), w1 = bf16_to_f32(rnd_bf16(lo, hi));
        ac = f32_from_bits(static_cast<uint32_t>(next()) & (round % 3 == 0 ? 0x807FFFFFu : 0xBFFFFFFFu));
      }
      acc[l] = ac;
      a[l] = uint32_t(bf16_hi(x1)) << 16 | bf16_hi(x0);
      b[l] = uint32_t(bf16_hi(w1)) << 16 | bf16_hi(w0);
      ref[l] = bf16_dot_step(bf16_dot_step(ac, x1, w1), x0, w0);
    }
    bf16_dot_instruction(acc, a, b);
    for (int l = 0; l < 16 && failure.empty(); ++l) {
      const bool both_nan = std::isnan(acc[l]) && std::isnan(ref[l]);
      if (!both_nan && f32_bits(acc[l]) != f32_bits(ref[l]))
        failure = fmt::format("VDPBF16PS gave 0x{:08X} where the contract says 0x{:08X} (round {}, lane {})",
                              f32_bits(acc[l]), f32_bits(ref[l]), round, l);
    }
  }
  for (int round = 0; round < 32 && failure.empty(); ++round) {
    alignas(64) float x[32];
    alignas(64) uint16_t out[32];
    const float special[] = {0x1p-130f,   -0x1p-140f,  NAN,           -INFINITY, 0x1.0081p0f,
                             0x1.0180p0f, 0x1.0080p0f, 3.4028235e38f, -0.0f,     0x1.fffffep-127f};
    for (int l = 0; l < 32; ++l)
      x[l] = round == 0 && l < 10 ? special[l] : f32_from_bits(static_cast<uint32_t>(next()));
    bf16_convert_instruction(x, out);
    for (int l = 0; l < 32 && failure.empty(); ++l)
      if (out[l] != bf16_hi(bf16_dot_round(x[l])))
        failure = fmt::format("VCVTNE2PS2BF16 gave 0x{:04X} for 0x{:08X}, the contract says 0x{:04X}", out[l],
                              f32_bits(x[l]), bf16_hi(bf16_dot_round(x[l])));
  }
  return failure.empty() ? "passed" : "failed: " + failure;
#else
  return "no AVX512_BF16";
#endif
}
}  // namespace

const std::string& bf16_dot_self_test() {
  static const std::string verdict = [] {
    std::string v = run_self_test();
    if (v.rfind("failed", 0) == 0)
      std::fprintf(stderr, "mxrl: the BF16 dot-product self-test %s; BF16 and MX GEMMs use the FMA path\n", v.c_str());
    return v;
  }();
  return verdict;
}

namespace {
std::atomic<bool> g_pair_lut{true};
}
bool pair_lut_enabled() { return g_pair_lut.load(std::memory_order_relaxed) && cpu_features().avx512_vbmi; }
void set_pair_lut_enabled(bool on) { g_pair_lut.store(on, std::memory_order_relaxed); }

bool amx_available() {
#if defined(__x86_64__)
  return request_amx();
#else
  return false;
#endif
}

}  // namespace detail

namespace {
#if defined(__x86_64__)
// Best-of-reps seconds of one kernel call over all of [m, n, K] with BF16 and
// with MX E4M3 weights (summed), for dot and fma, on the calling thread.
struct PairTimes {
  double dot = 0, fma = 0;
};
PairTimes time_pair_kernels(int64_t m, int64_t n) {
  constexpr int64_t K = 1024;
  constexpr int kReps = 7;
  uint64_t state = 0x2545F4914F6CDD1Dull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  std::vector<float> x(static_cast<size_t>(m * K)), y(static_cast<size_t>(m * n));
  for (float& v : x) v = static_cast<float>(static_cast<int64_t>(next() % 2001) - 1000) * 1e-3f;
  std::vector<uint16_t> wb(static_cast<size_t>(n * K));
  std::vector<uint8_t> codes(static_cast<size_t>(n * K)), scales(static_cast<size_t>(n * K / kMxBlock));
  for (auto& v : wb) v = f32_to_bf16(static_cast<float>(static_cast<int64_t>(next() % 2001) - 1000) * 2e-5f);
  for (auto& c : codes) c = static_cast<uint8_t>(next() % 0x7F) | static_cast<uint8_t>(next() & 0x80);  // no NaN
  for (auto& s : scales) s = static_cast<uint8_t>(118 + next() % 8);
  WeightView vm{WFormat::MX, n, K, codes.data(), scales.data()};
  vm.elem = ElemType::E4M3;
  const PackedWeight pw[2] = {PackedWeight::pack({WFormat::BF16, n, K, wb.data()}), PackedWeight::pack(vm)};
  const detail::GemmKernels* kern[2] = {&detail::kGemmAvx512Dot, &detail::kGemmAvx512};
  double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};  // [kernel][format]
  for (int rep = 0; rep <= kReps; ++rep)  // rep 0: warm-up (caches, the scratch buffers)
    for (int i = 0; i < 2; ++i) {
      const int kk = (rep + i) % 2;  // alternate which kernel goes first
      for (int f = 0; f < 2; ++f) {
        const auto t0 = std::chrono::steady_clock::now();
        kern[kk]->run(x.data(), pw[f], y.data(), 0, m, 0, pw[f].panels());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0) best[kk][f] = std::min(best[kk][f], s);
      }
    }
  return {best[0][0] + best[0][1], best[1][0] + best[1][1]};
}
#endif

PairKernelChoice choose_pair_kernels() {
  PairKernelChoice c;
  c.classes = {{"direct", 1, detail::kPairDirectRows, PairKernel::Fma},
               {"blocked", detail::kPairDirectRows + 1, 0, PairKernel::Fma}};
  if (!cpu_features().avx512) {
    c.how = "no AVX-512";
    return c;
  }
  const std::string& verdict = detail::bf16_dot_self_test();
  const char* env = std::getenv("MXRL_PAIR_KERNEL");
  const std::string forced = env ? env : "";
  if (forced == "fma" || forced == "dot") {
    const bool dot = forced == "dot" && verdict == "passed";
    if (forced == "dot" && !dot)
      std::fprintf(stderr, "mxrl: MXRL_PAIR_KERNEL=dot, but VDPBF16PS is not usable here (%s): fma\n",
                   verdict.c_str());
    for (PairKernelClass& k : c.classes) k.kernel = dot ? PairKernel::Dot : PairKernel::Fma;
    c.how = "MXRL_PAIR_KERNEL=" + forced;
    return c;
  }
  if (!forced.empty() && forced != "auto")
    std::fprintf(stderr, "mxrl: MXRL_PAIR_KERNEL=%s is not one of auto, dot, fma: ignored\n", forced.c_str());
  if (verdict != "passed") {
    c.how = "no VDPBF16PS: " + verdict;
    return c;
  }
#if defined(__x86_64__)
  const int64_t shape[2][2] = {{1, 512}, {48, 128}};  // {M, N} per class; M in the class's rows
  for (int i = 0; i < 2; ++i) {
    const PairTimes t = time_pair_kernels(shape[i][0], shape[i][1]);
    PairKernelClass& k = c.classes[static_cast<size_t>(i)];
    k.dot_us = t.dot * 1e6, k.fma_us = t.fma * 1e6;
    k.kernel = t.fma < t.dot ? PairKernel::Fma : PairKernel::Dot;
  }
  c.how = "measured";
#endif
  return c;
}

std::string rows_text(const PairKernelClass& k) {
  return k.max_rows == 0 ? fmt::format("{}+ rows", k.min_rows) : fmt::format("{}-{} rows", k.min_rows, k.max_rows);
}
}  // namespace

const PairKernelChoice& pair_kernel_choice() {
  static const PairKernelChoice c = choose_pair_kernels();
  return c;
}

PairKernel resolve_pair_kernel(PairKernel k, int64_t rows) {
  if (k == PairKernel::Amx && detail::amx_available()) return PairKernel::Amx;  // only when asked for
  if (k == PairKernel::Fma) return PairKernel::Fma;
  if (k == PairKernel::Dot) return detail::bf16_dot_self_test() == "passed" ? PairKernel::Dot : PairKernel::Fma;
  const std::vector<PairKernelClass>& c = pair_kernel_choice().classes;
  return rows <= detail::kPairDirectRows ? c[0].kernel : c[1].kernel;
}

std::string pair_kernel_summary(PairKernel requested, bool with_times) {
  if (requested == PairKernel::Amx && detail::amx_available()) return "amx";
  if (requested == PairKernel::Fma || requested == PairKernel::Dot)
    return pair_kernel_name(resolve_pair_kernel(requested, 1));
  const PairKernelChoice& c = pair_kernel_choice();
  std::string s = requested == PairKernel::Amx ? "auto (amx unavailable):" : "auto:";
  for (size_t i = 0; i < c.classes.size(); ++i) {
    const PairKernelClass& k = c.classes[i];
    s += fmt::format("{} {} at {}", i ? "," : "", pair_kernel_name(k.kernel), rows_text(k));
    if (with_times && k.dot_us >= 0) s += fmt::format(" (dot {:.0f} us, fma {:.0f} us)", k.dot_us, k.fma_us);
  }
  if (c.how != "measured") s += " (" + c.how + ")";
  return s;
}

const char* pair_kernel_name(PairKernel k) {
  switch (k) {
    case PairKernel::Auto: return "auto";
    case PairKernel::Dot: return "dot";
    case PairKernel::Fma: return "fma";
    case PairKernel::Amx: return "amx";
  }
  return "?";
}

PairKernel pair_kernel_from_name(const std::string& name) {
  PairKernel k;
  if (name == "auto") {
    k = PairKernel::Auto;
  } else if (name == "fma") {
    k = PairKernel::Fma;
  } else if (name == "dot") {
    if (detail::bf16_dot_self_test() != "passed")
      fail("pair kernel 'dot' (VDPBF16PS) is not available here: {}", detail::bf16_dot_self_test());
    k = PairKernel::Dot;
  } else if (name == "amx") {
    if (!detail::amx_available())
      fail("pair kernel 'amx' is not available here: {}", cpu_features().amx_bf16 && cpu_features().amx_tile
                                                              ? "the OS refused the AMX tile state"
                                                              : "this CPU has no AMX-BF16");
    k = PairKernel::Amx;
  } else {
    fail("unknown pair kernel '{}' (auto, fma, dot, amx)", name);
  }
  return k;
}

namespace {
constexpr int kPanel = PackedWeight::kPanel;

float canonical(float v) { return std::isnan(v) ? f32_from_bits(detail::kGemmNan) : v; }

void validate(const WeightView& w, const char* who) {
  if (w.n < 0 || w.k < 0) fail("{}: negative weight shape [{}, {}]", who, w.n, w.k);
  if (w.n * w.k > 0 && !w.data) fail("{}: {} weight [{}, {}] has no data", who, wformat_name(w.fmt), w.n, w.k);
  if (w.fmt == WFormat::MX) {
    if (w.k % kMxBlock != 0)
      fail("{}: MX weight [{}, {}]: K must be a multiple of {} (row blocks along K)", who, w.n, w.k, kMxBlock);
    if (w.n * w.k > 0 && !w.mx_scales) fail("{}: MX weight [{}, {}] has no scales", who, w.n, w.k);
  }
  if (w.fmt == WFormat::FP8) {
    if (w.fp8_grid.group_rows < 1 || w.fp8_grid.group_cols < 1)
      fail("{}: FP8 grid {}x{} must have groups of at least 1x1", who, w.fp8_grid.group_rows, w.fp8_grid.group_cols);
    if (w.n * w.k > 0 && !w.fp8_scales) fail("{}: FP8 weight [{}, {}] has no scales", who, w.n, w.k);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows [n0, n0 + cols) of a row-major [N][K] source into one panel [K][32]
// (zeros past cols), W's columns [k_begin, K) only; kInterleave puts column j
// at 2j (j < 16) or 2(j-16) + 1. K is walked in blocks so the 32 destination
// lines of a block stay in L1. The vector packs below finish their last
// K % 8 or K % 16 columns with it.
template <typename T, bool kInterleave>
void pack_panel(const T* s, int64_t K, int64_t n0, int64_t cols, T* d, int64_t k_begin = 0) {
  constexpr int64_t kKb = 64;
  for (int64_t k0 = k_begin; k0 < K; k0 += kKb) {
    const int64_t kb = std::min(kKb, K - k0);
    for (int64_t j = 0; j < kPanel; ++j) {
      const int64_t pos = kInterleave ? (j < 16 ? 2 * j : 2 * (j - 16) + 1) : j;
      T* dd = d + k0 * kPanel + pos;
      if (j < cols) {
        const T* ss = s + (n0 + j) * K + k0;
        for (int64_t k = 0; k < kb; ++k) dd[k * kPanel] = ss[k];
      } else {
        for (int64_t k = 0; k < kb; ++k) dd[k * kPanel] = T(0);
      }
    }
  }
}
#if defined(__SSE2__)
// 16 rows x 16 bytes, transposed in registers: a[i] holds row i's bytes
// k0..k0+15 and becomes the 16 rows' bytes at k0 + i. Each round maps
// register R, byte c to register 2(R mod 8) + c/8, byte 2(c mod 8) + R/8: a
// rotation by one of the 8 index bits (R, c), so four rounds swap R and c.
inline void transpose_16x16_bytes(__m128i a[16]) {
  __m128i t[16];
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm_unpacklo_epi8(a[i], a[i + 8]);
      t[2 * i + 1] = _mm_unpackhi_epi8(a[i], a[i + 8]);
    }
    for (int i = 0; i < 16; ++i) a[i] = t[i];
  }
}

// pack_panel<uint8_t, true> for a full panel (32 rows) and k in [k0, k0 + 16):
// rows 0..15 and 16..31 are transposed apart, and their byte-wise unpack
// interleaves columns i and 16 + i as the panel layout wants. The scalar loop
// of pack_panel is the reference (gemm_test compares every element).
inline void pack_panel_bytes16(const uint8_t* s, int64_t K, int64_t n0, int64_t k0, uint8_t* d) {
  __m128i lo[16], hi[16];
  for (int i = 0; i < 16; ++i) {
    lo[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (n0 + i) * K + k0));
    hi[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (n0 + 16 + i) * K + k0));
  }
  transpose_16x16_bytes(lo);
  transpose_16x16_bytes(hi);
  for (int k = 0; k < 16; ++k) {
    auto* dd = reinterpret_cast<__m128i*>(d + (k0 + k) * kPanel);
    _mm_storeu_si128(dd, _mm_unpacklo_epi8(lo[k], hi[k]));
    _mm_storeu_si128(dd + 1, _mm_unpackhi_epi8(lo[k], hi[k]));
  }
}

// pack_panel<uint16_t, true> for a full panel and k in [k0, k0 + 8): rows j
// and 16 + j unpacked into 32-bit pairs (one per k), then each group of four
// rows' pairs transposed 4 x 4 so that one store writes pairs of rows 4g ..
// 4g + 3 at one k. The scalar loop of pack_panel is the reference.
inline void pack_panel_pairs8(const uint16_t* s, int64_t K, int64_t n0, int64_t k0, uint16_t* d) {
  for (int g = 0; g < 4; ++g) {
    __m128i lo[4], hi[4];  // rows 4g + i and 16 + 4g + i: pairs at k0 .. k0 + 3 and k0 + 4 .. k0 + 7
    for (int i = 0; i < 4; ++i) {
      const int64_t j = 4 * g + i;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (n0 + j) * K + k0));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + (n0 + 16 + j) * K + k0));
      lo[i] = _mm_unpacklo_epi16(a, b);
      hi[i] = _mm_unpackhi_epi16(a, b);
    }
    for (int h = 0; h < 2; ++h) {
      const __m128i* p = h == 0 ? lo : hi;
      const __m128i t0 = _mm_unpacklo_epi32(p[0], p[1]), t1 = _mm_unpacklo_epi32(p[2], p[3]);
      const __m128i t2 = _mm_unpackhi_epi32(p[0], p[1]), t3 = _mm_unpackhi_epi32(p[2], p[3]);
      uint16_t* dd = d + (k0 + 4 * h) * kPanel + 8 * g;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dd), _mm_unpacklo_epi64(t0, t1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dd + kPanel), _mm_unpackhi_epi64(t0, t1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dd + 2 * kPanel), _mm_unpacklo_epi64(t2, t3));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dd + 3 * kPanel), _mm_unpackhi_epi64(t2, t3));
    }
  }
}
#endif

// BF16 pairs of one panel: pack_panel<uint16_t, true>, with full panels done 8
// k at a time in registers (the scalar loop's 16-bit stores were most of a
// BF16 model's prepare).
void pack_panel_pairs(const uint16_t* s, int64_t K, int64_t n0, int64_t cols, uint16_t* d) {
#if defined(__SSE2__)
  if (cols == kPanel) {
    const int64_t k8 = K / 8 * 8;
    for (int64_t k0 = 0; k0 < k8; k0 += 8) pack_panel_pairs8(s, K, n0, k0, d);
    pack_panel<uint16_t, true>(s, K, n0, cols, d, k8);  // the last K % 8 columns
    return;
  }
#endif
  pack_panel<uint16_t, true>(s, K, n0, cols, d);
}

// Element codes (MX, FP8) of one panel: pack_panel<uint8_t, true>, with full
// panels done 16 k at a time in registers (one store per byte made the
// scalar loop the larger part of an MX model's prepare).
void pack_panel_codes(const uint8_t* s, int64_t K, int64_t n0, int64_t cols, uint8_t* d) {
#if defined(__SSE2__)
  if (cols == kPanel) {
    const int64_t k16 = K / 16 * 16;
    for (int64_t k0 = 0; k0 < k16; k0 += 16) pack_panel_bytes16(s, K, n0, k0, d);
    pack_panel<uint8_t, true>(s, K, n0, cols, d, k16);  // the last K % 16 columns
    return;
  }
#endif
  pack_panel<uint8_t, true>(s, K, n0, cols, d);
}

// The same panel from the transpose: s is W^T, row-major [K][N], so each k
// gives 32 consecutive source elements (one contiguous read, one contiguous
// write per k, no transpose).
template <typename T, bool kInterleave>
void pack_panel_transposed(const T* s, int64_t N, int64_t K, int64_t n0, int64_t cols, T* d) {
  for (int64_t k = 0; k < K; ++k) {
    const T* ss = s + k * N + n0;
    T* dd = d + k * kPanel;
    if (cols == kPanel) {  // a full panel: the interleave is an unpack of the two halves
      if constexpr (!kInterleave) {
        std::memcpy(dd, ss, kPanel * sizeof(T));
        continue;
      }
#if defined(__SSE2__)
      const auto* si = reinterpret_cast<const __m128i*>(ss);
      auto* di = reinterpret_cast<__m128i*>(dd);
      if constexpr (sizeof(T) == 1) {  // columns 0..15 and 16..31 -> 0, 16, 1, 17, ..
        const __m128i lo = _mm_loadu_si128(si), hi = _mm_loadu_si128(si + 1);
        _mm_storeu_si128(di, _mm_unpacklo_epi8(lo, hi));
        _mm_storeu_si128(di + 1, _mm_unpackhi_epi8(lo, hi));
        continue;
      } else if constexpr (sizeof(T) == 2) {
        const __m128i lo0 = _mm_loadu_si128(si), lo1 = _mm_loadu_si128(si + 1);
        const __m128i hi0 = _mm_loadu_si128(si + 2), hi1 = _mm_loadu_si128(si + 3);
        _mm_storeu_si128(di, _mm_unpacklo_epi16(lo0, hi0));
        _mm_storeu_si128(di + 1, _mm_unpackhi_epi16(lo0, hi0));
        _mm_storeu_si128(di + 2, _mm_unpacklo_epi16(lo1, hi1));
        _mm_storeu_si128(di + 3, _mm_unpackhi_epi16(lo1, hi1));
        continue;
      }
#endif
    }
    for (int64_t j = 0; j < kPanel; ++j) {
      const int64_t pos = kInterleave ? (j < 16 ? 2 * j : 2 * (j - 16) + 1) : j;
      dd[pos] = j < cols ? ss[j] : T(0);
    }
  }
}
}  // namespace

float weight_value(const WeightView& w, int64_t n, int64_t k) {
  const int64_t i = n * w.k + k;
  switch (w.fmt) {
    case WFormat::F32: return static_cast<const float*>(w.data)[i];
    case WFormat::BF16: return bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case WFormat::MX: {
      const uint8_t s = w.mx_scales[n * (w.k / kMxBlock) + k / kMxBlock];
      if (s == kE8M0Nan) return f32_from_bits(detail::kGemmNan);
      // decode is exact and 2^(s-127) (s = 0: the FP32 subnormal 2^-127) too: one rounding.
      return canonical(elem_decode(w.elem, static_cast<const uint8_t*>(w.data)[i]) * e8m0_to_f32(s));
    }
    case WFormat::FP8: {
      const int64_t ncg = ceil_div(w.k, w.fp8_grid.group_cols);
      const float s = w.fp8_scales[(n / w.fp8_grid.group_rows) * ncg + k / w.fp8_grid.group_cols];
      return canonical(elem_decode(w.elem, static_cast<const uint8_t*>(w.data)[i]) * s);
    }
  }
  return 0;
}

void PackedWeight::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

size_t PackedWeight::bytes() const {
  return panel_bytes_ * static_cast<size_t>(panels_) + mx_scales_.size() + fp8_scales_.size() * sizeof(float) +
         fast_.size();
}

uint64_t PackedWeight::fingerprint() const {
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st(XXH3_createState(), XXH3_freeState);
  if (!st) fail("gemm fingerprint: out of memory");
  XXH3_64bits_reset(st.get());
  auto add = [&](const void* p, size_t bytes) {
    if (bytes > 0) XXH3_64bits_update(st.get(), p, bytes);
  };
  const int64_t fields[] = {static_cast<int64_t>(fmt_),
                            static_cast<int64_t>(elem_),
                            n_,
                            k_,
                            panels_,
                            static_cast<int64_t>(panel_bytes_),
                            group_k_,
                            k_groups_};
  add(fields, sizeof(fields));
  add(data_.get(), panel_bytes_ * static_cast<size_t>(panels_));
  add(mx_scales_.data(), mx_scales_.size());
  add(fp8_scales_.data(), fp8_scales_.size() * sizeof(float));
  add(fast_.data(), fast_.size());
  return XXH3_64bits_digest(st.get());
}

PackedWeight PackedWeight::pack(const WeightView& w, const Exec& exec) {
  validate(w, "gemm pack");
  return pack_impl(w, false, exec);
}

PackedWeight PackedWeight::pack_transposed(const WeightView& wt, const Exec& exec) {
  if (wt.fmt == WFormat::FP8) fail("gemm pack_transposed: FP8 grids are packed from W, not W^T");
  if (wt.n < 0 || wt.k < 0) fail("gemm pack_transposed: negative shape [{}, {}]", wt.n, wt.k);
  if (wt.n * wt.k > 0 && !wt.data)
    fail("gemm pack_transposed: {} W^T [{}, {}] has no data", wformat_name(wt.fmt), wt.n, wt.k);
  if (wt.fmt == WFormat::MX) {
    if (wt.n % kMxBlock != 0)
      fail("gemm pack_transposed: MX W^T [{}, {}]: its rows (W's K) must be a multiple of {}", wt.n, wt.k, kMxBlock);
    if (wt.n * wt.k > 0 && !wt.mx_scales) fail("gemm pack_transposed: MX W^T [{}, {}] has no scales", wt.n, wt.k);
  }
  WeightView w = wt;  // W's shape; data and scales stay in W^T's layout
  w.n = wt.k, w.k = wt.n;
  return pack_impl(w, true, exec);
}

PackedWeight PackedWeight::pack_impl(const WeightView& w, bool transposed, const Exec& exec) {
  PackedWeight pw;
  pw.fmt_ = w.fmt;
  pw.elem_ = w.elem;
  pw.n_ = w.n;
  pw.k_ = w.k;
  pw.panels_ = ceil_div(w.n, kPanel);
  const int64_t N = w.n, K = w.k, P = pw.panels_;
  const size_t esize = w.fmt == WFormat::F32 ? 4 : w.fmt == WFormat::BF16 ? 2 : 1;
  pw.panel_bytes_ = static_cast<size_t>(K) * kPanel * esize;
  const size_t total = std::max<size_t>(64, (pw.panel_bytes_ * P + 63) / 64 * 64);
  pw.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, total)));
  if (!pw.data_) fail("gemm pack: out of memory ({} bytes)", total);
  std::memset(pw.data_.get() + pw.panel_bytes_ * P, 0, total - pw.panel_bytes_ * P);
  const ElemTraits& f = elem_traits(w.elem);
  const bool coded = w.fmt == WFormat::MX || w.fmt == WFormat::FP8;
  if (coded) {
    pw.group_k_ = w.fmt == WFormat::MX ? kMxBlock : w.fp8_grid.group_cols;
    pw.k_groups_ = K == 0 ? 0 : ceil_div(K, pw.group_k_);
    if (w.fmt == WFormat::MX)
      pw.mx_scales_.assign(static_cast<size_t>(P * pw.k_groups_ * kPanel), 127);
    else
      pw.fp8_scales_.assign(static_cast<size_t>(P * pw.k_groups_ * kPanel), 1.0f);
  }
  pw.fast_.assign(static_cast<size_t>(P), 0);
  const uint8_t code_limit = static_cast<uint8_t>(f.num_codes() - 1);
  const int fold_exp = 127 - f.bias;  // a code's shifted bits read as FP32 are its value * 2^-fold_exp
  std::vector<int64_t> bad_code(static_cast<size_t>(P), -1);  // W's [n][k] index of a code that does not fit
  std::vector<uint8_t> bad_value(static_cast<size_t>(P), 0);
  // Element (n, k) of W in the source layout.
  const auto at = [&](int64_t n, int64_t k) { return transposed ? k * N + n : n * K + k; };

  // Codes whose magnitude (code & 0x7F) is at least this mean NaN or Inf (0x80: none).
  const int special_min = !f.has_nan ? 0x80 : f.has_inf ? 0x7C : 0x7F;
  parallel_for(
      exec.pool, P,
      [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          uint8_t* dst = pw.data_.get() + p * pw.panel_bytes_;
          const int64_t cols = std::min<int64_t>(kPanel, N - p * kPanel);
          const int64_t n0 = p * kPanel;
          switch (w.fmt) {
            case WFormat::F32:
              if (transposed)
                pack_panel_transposed<float, false>(static_cast<const float*>(w.data), N, K, n0, cols,
                                                    reinterpret_cast<float*>(dst));
              else
                pack_panel<float, false>(static_cast<const float*>(w.data), K, n0, cols, reinterpret_cast<float*>(dst));
              break;
            case WFormat::BF16:
              if (transposed)
                pack_panel_transposed<uint16_t, true>(static_cast<const uint16_t*>(w.data), N, K, n0, cols,
                                                      reinterpret_cast<uint16_t*>(dst));
              else
                pack_panel_pairs(static_cast<const uint16_t*>(w.data), K, n0, cols, reinterpret_cast<uint16_t*>(dst));
              break;
            case WFormat::MX:
            case WFormat::FP8: {
              const auto* s = static_cast<const uint8_t*>(w.data);
              if (transposed)
                pack_panel_transposed<uint8_t, true>(s, N, K, n0, cols, dst);
              else
                pack_panel_codes(s, K, n0, cols, dst);
              // The checks read the packed panel: every code of the panel's columns, in any order.
              bool fast = f.bits == 8;
              uint8_t any_bits = 0, max_mag = 0, neg_zero = 0;  // OR and max reductions: they vectorize
              for (int64_t i = 0; i < K * kPanel; ++i) {
                any_bits |= dst[i];
                max_mag = std::max<uint8_t>(max_mag, dst[i] & 0x7F);
                neg_zero |= dst[i] == 0x80;
              }
              if (max_mag >= special_min) fast = false;
              if (any_bits & ~code_limit)  // the first bad code in W's row-major order
                for (int64_t j = 0; j < cols && bad_code[p] < 0; ++j)
                  for (int64_t k = 0; k < K; ++k)
                    if (s[at(n0 + j, k)] > code_limit) {
                      bad_code[p] = (n0 + j) * K + k;
                      bad_value[p] = s[at(n0 + j, k)];
                      break;
                    }
              const int64_t G = pw.k_groups_;
              bool nan_scale = false;
              uint8_t min_scale = 255;
              if (w.fmt == WFormat::MX) {
                uint8_t* ds = pw.mx_scales_.data() + p * G * kPanel;
                for (int64_t g = 0; g < G; ++g)
                  for (int64_t j = 0; j < cols; ++j) {
                    const uint8_t b = transposed ? w.mx_scales[g * N + n0 + j] : w.mx_scales[(n0 + j) * G + g];
                    ds[g * kPanel + j] = b;
                    if (b != kE8M0Nan && static_cast<int>(b) + fold_exp > 254) fast = false;
                    if (b == kE8M0Nan) nan_scale = true;
                    min_scale = std::min(min_scale, b);
                  }
              } else {
                float* ds = pw.fp8_scales_.data() + p * G * kPanel;
                for (int64_t g = 0; g < G; ++g)
                  for (int64_t j = 0; j < cols; ++j) {
                    const float v = w.fp8_scales[((n0 + j) / w.fp8_grid.group_rows) * G + g];
                    ds[g * kPanel + j] = v;
                    if (std::isfinite(v) && !std::isfinite(std::ldexp(v, fold_exp))) fast = false;
                  }
                if (fast)
                  for (int64_t i = 0; i < G * kPanel; ++i) ds[i] = std::ldexp(ds[i], fold_exp);  // exact
              }
              const bool lut = w.fmt == WFormat::MX && w.elem == ElemType::E4M3 && !nan_scale;
              const bool plain = lut && !neg_zero && min_scale >= 9;
              pw.fast_[p] = !fast ? 0
                                  : static_cast<uint8_t>(1 | (lut ? PackedWeight::kLutBit : 0) |
                                                         (plain ? PackedWeight::kLutPlainBit : 0));
              break;
            }
          }
        }
      },
      std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, K * kPanel)));
  for (int64_t p = 0; p < P; ++p)
    if (bad_code[p] >= 0)
      fail("gemm pack: element code 0x{:02X} at [{}, {}] does not fit {} ({} bits)", bad_value[p], bad_code[p] / K,
           bad_code[p] % K, f.name, f.bits);
  return pw;
}

void gemm(const float* x, int64_t m, const PackedWeight& w, float* y, const Exec& exec) {
  if (m < 0) fail("gemm: negative row count {}", m);
  const int64_t N = w.n(), K = w.k();
  if (m == 0 || N == 0) return;
  if (K == 0) {
    std::memset(y, 0, static_cast<size_t>(m * N) * sizeof(float));
    return;
  }
  const detail::GemmKernels& kern = detail::gemm_kernels(exec, w.format());
  // Row blocks of (nearly) equal size, their count a multiple of the thread
  // count when there are several, so that each thread gets whole blocks.
  const int64_t threads = exec.pool ? exec.pool->size() : 1, P = w.panels();
  int64_t nmb = ceil_div(m, kern.block_rows);
  if (nmb > 1) nmb = ceil_div(nmb, threads) * threads;
  const int64_t mc = ceil_div(ceil_div(m, nmb), kern.tile_rows) * kern.tile_rows;
  nmb = ceil_div(m, mc);
  // Work item: (row block, panel). Each thread gets a contiguous run of items,
  // cut into calls that each cover one row block and a run of panels.
  // At least ~2 MFLOP per thread (10-40 us): waking a worker costs 5 us or
  // more. But few rows make a GEMM a stream of weights (M = 1 decoding: 2
  // MFLOP is 2 MiB of BF16 weights, a whole 1024 x 1024 layer on one thread):
  // then chunks of at least 256 KiB of packed weights, at least 4 per thread
  // where the weight allows. Any split gives the same bits (no split-K).
  const int64_t item_flops = 2 * std::min(m, mc) * kPanel * K;
  int64_t grain = std::max<int64_t>(1, (int64_t(1) << 21) / item_flops);
  if (m <= 8) {
    const int64_t item_bytes = std::max<int64_t>(1, static_cast<int64_t>(w.bytes()) / P);
    grain = std::max<int64_t>(std::max<int64_t>(1, (int64_t(256) << 10) / item_bytes),
                              std::min(grain, ceil_div(nmb * P, 4 * threads)));
  }
  parallel_for(
      exec.pool, nmb * P,
      [&](int64_t b, int64_t e) {
        while (b < e) {
          const int64_t mb = b / P, p0 = b % P, p1 = std::min(P, p0 + (e - b));
          kern.run(x, w, y, mb * mc, std::min(m, (mb + 1) * mc), p0, p1);
          b += p1 - p0;
        }
      },
      grain);
}

void gemm_reference(const float* x, int64_t m, const WeightView& w, float* y) {
  validate(w, "gemm_reference");
  if (m < 0) fail("gemm_reference: negative row count {}", m);
  const bool pairs = detail::pair_contract(w.fmt);
  const int64_t K = w.k, K2 = (K + 1) / 2 * 2;  // the pair chain pads K with a zero
  std::vector<float> wrow(static_cast<size_t>(K2), 0.0f), xrow(static_cast<size_t>(K2), 0.0f);
  for (int64_t n = 0; n < w.n; ++n) {
    for (int64_t k = 0; k < K; ++k)
      wrow[k] = pairs ? detail::bf16_dot_daz(weight_value(w, n, k)) : weight_value(w, n, k);
    for (int64_t r = 0; r < m; ++r) {
      float acc = 0.0f;
      if (pairs) {
        for (int64_t k = 0; k < K; ++k) xrow[k] = detail::bf16_dot_round(x[r * K + k]);
        for (int64_t k = 0; k < K2; k += 2) {
          acc = detail::bf16_dot_step(acc, xrow[k + 1], wrow[k + 1]);
          acc = detail::bf16_dot_step(acc, xrow[k], wrow[k]);
        }
      } else {
        for (int64_t k = 0; k < K; ++k) acc = std::fma(x[r * K + k], wrow[k], acc);
      }
      y[r * w.n + n] = canonical(acc);
    }
  }
}

void gemm_split_k(const float* x, int64_t m, const WeightView& w, float* y, int64_t splits, ThreadPool* pool) {
  validate(w, "gemm_split_k");
  if (m < 0) fail("gemm_split_k: negative row count {}", m);
  if (splits < 1) fail("gemm_split_k: {} splits", splits);
  // Output columns in parallel: each output's sum is the same whatever thread makes it.
  parallel_for(
      pool, w.n,
      [&](int64_t n0, int64_t n1) {
        std::vector<float> wrow(static_cast<size_t>(w.k)), part(static_cast<size_t>(splits));
        for (int64_t n = n0; n < n1; ++n) {
          for (int64_t k = 0; k < w.k; ++k) wrow[k] = weight_value(w, n, k);
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t s = 0; s < splits; ++s) {
              float acc = 0.0f;
              for (int64_t k = w.k * s / splits; k < w.k * (s + 1) / splits; ++k)
                acc = std::fma(x[r * w.k + k], wrow[k], acc);
              part[s] = acc;
            }
            float sum = 0.0f;
            for (int64_t s = 0; s < splits; ++s) sum += part[s];
            y[r * w.n + n] = canonical(sum);
          }
        }
      },
      8);
}

}  // namespace mxrl
