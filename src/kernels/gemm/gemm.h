// The GEMM both engines use for their linear layers: Y[M, N] = X[M, K] * W^T in
// FP32, with W[N, K] stored as FP32, BF16, MX (element codes + E8M0 row-block
// scales) or an FP8 grid (codes + FP32 group scales).
//
// Contract (batch invariance, docs/reference.md §5). Every output is one sequential chain
// over K, so a row's result is bitwise independent of M, of the row's position
// in X, of the thread count, of the tiling and of the backend; there is no
// split-K. With w[n][k] = weight_value(W, n, k):
//   - FP32 and FP8 weights: y = 0; for k = 0 .. K-1: y = fma(x[m][k], w[n][k], y)
//     (FP32, one rounding per step; FP32 subnormals as IEEE, no flushing).
//   - BF16 and MX weights (the "pair chain", what VDPBF16PS computes): the
//     operands are BF16 values, xb = bf16(x) (RNE; an FP32 subnormal x is a
//     signed zero) and wb = w (exact in BF16 for BF16 weights and for every
//     normal MX value; a w below 2^-126 is a signed zero); K is padded with a
//     zero to even length, and for each pair i = 0, 1, ..:
//       y = ftz(fma(xb[2i+1], wb[2i+1], y));  y = ftz(fma(xb[2i], wb[2i], y))
//     (odd element first; exact products; RNE; ftz: a subnormal result is a
//     signed zero). The linears' activations and gradients are already BF16
//     values (bf16 rounding, MX round trips), so bf16(x) changes nothing there.
//     The AVX-512 backend computes it with VDPBF16PS ("dot", only where the
//     instruction passes the self-test below) or two FMAs per pair under
//     MXCSR FTZ ("fma"): the same bits. By default (PairKernel::Auto) it
//     takes, per shape class, whichever of the two a start-up
//     micro-benchmark finds faster on this CPU (pair_kernel_choice below).
// A NaN output is always the canonical quiet NaN 0x7FC00000 (which NaN an
// FMA propagates depends on operand order, so the payload is not kept).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "numerics/formats.h"
#include "numerics/fp8_grid.h"
#include "numerics/mx.h"

namespace mxrl {

class ThreadPool;

enum class WFormat : uint8_t { F32, BF16, MX, FP8 };
const char* wformat_name(WFormat f);

// A weight W[N, K] in its storage format, row-major (K contiguous): what a
// linear layer packs from.
struct WeightView {
  WFormat fmt = WFormat::F32;
  int64_t n = 0, k = 0;
  const void* data = nullptr;  // F32: float[n*k]; BF16: uint16_t bits [n*k]; MX / FP8: element codes uint8_t[n*k]
  const uint8_t* mx_scales = nullptr;  // MX: E8M0 bytes [n][k/32] (row blocks 1x32 along K)
  const float* fp8_scales = nullptr;   // FP8: FP32 scales [ceil(n/gr)][ceil(k/gc)] as in fp8_grid.h
  Fp8Grid fp8_grid{1, 1};
  ElemType elem = ElemType::E4M3;  // MX and FP8 element type
};

// The FP32 value the GEMM uses for w[n][k]: F32 as is; BF16 widened (exact);
// MX decode(code) * 2^(scale-127) (exact, single rounding, as mx_dequantize);
// FP8 fp32(decode(code) * scale) (as fp8_dequantize). NaN comes out as the
// canonical 0x7FC00000, as the dequantizers give it.
float weight_value(const WeightView& w, int64_t n, int64_t k);

// W repacked for the kernels: an owned copy, built once per weight version and
// reused for many calls. The layout is the same for every backend: panels of
// kPanel = 32 output columns, K-major ([N/32][K][32], the last panel padded with
// zero codes), in the storage format of the source (FP32, BF16 bits, or element
// codes with their scales kept per panel), so that memory traffic for M = 1
// stays that of the source format.
class PackedWeight {
 public:
  static constexpr int kPanel = 32;

  // Throws mxrl::Error on a bad view: negative shape, null data, MX with K not
  // a multiple of 32, an FP8 grid with a group dimension < 1, element codes
  // outside the element type's bit width.
  static PackedWeight pack(const WeightView& w, const Exec& exec = {});
  // The same packing (bitwise) from W's transpose: wt describes W^T [K, N],
  // row-major (wt.n = K, wt.k = N), as F32, BF16 or MX codes; MX scales are
  // then W^T's column blocks (32 x 1 along K: E8M0 [K/32][N], mx_quantize
  // Axis::Col), which are W's row blocks. For an operand that is at hand
  // transposed (the wgrad's X): no transpose before packing. Throws as pack,
  // and for FP8 or an MX W^T whose rows are not a multiple of 32.
  static PackedWeight pack_transposed(const WeightView& wt, const Exec& exec = {});

  PackedWeight() = default;
  PackedWeight(PackedWeight&&) noexcept = default;
  PackedWeight& operator=(PackedWeight&&) noexcept = default;
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  WFormat format() const { return fmt_; }
  ElemType elem() const { return elem_; }
  size_t bytes() const;  // owned storage
  // XXH3-64 over the shape and format fields and every owned buffer (panels,
  // scales, fast flags): equal for two packings of the same view, and changed
  // by any difference in them. What a freshness check compares against a
  // re-pack of the weights the linear holds.
  uint64_t fingerprint() const;

  // --- layout, for the kernels ---
  int64_t panels() const { return panels_; }
  // Elements of panel p, [k][32]: float (F32, columns in order), uint16_t
  // BF16 bits (BF16) or uint8_t element codes (MX, FP8). For the 16- and 8-bit
  // formats the pair at 2i, 2i+1 holds columns i and 16 + i, so that one
  // 32-bit lane (after widening codes to 16 bits) yields both columns.
  const void* panel_data(int64_t p) const { return data_.get() + p * panel_bytes_; }
  // MX: E8M0 bytes [k/32][32] of panel p. FP8: FP32 scales [groups][32] of
  // panel p, one per column and group of `group_k()` consecutive k; folded
  // (see below) when panel_fast(p).
  const uint8_t* panel_mx_scales(int64_t p) const { return mx_scales_.data() + p * (k_ / kMxBlock) * kPanel; }
  const float* panel_fp8_scales(int64_t p) const { return fp8_scales_.data() + p * k_groups_ * kPanel; }
  int64_t group_k() const { return group_k_; }  // MX: 32; FP8: the grid's group_cols
  int64_t k_groups() const { return k_groups_; }
  // MX / FP8: panel p has no NaN/Inf element codes and every scale s times
  // 2^(127 - bias) is exact, so a code widened by bit shifts times the folded
  // scale is the weight value in one rounding. FP8 scales of a fast panel are
  // stored folded (s * 2^(127 - bias)). Otherwise the kernels decode codes
  // exactly (NaN/Inf included) and multiply by the plain scale.
  bool panel_fast(int64_t p) const { return fast_[p] != 0; }
  // MX E4M3: panel p is fast and has no NaN scale, so the BF16 pair kernels
  // turn its codes into BF16 pairs by table lookup (gemm_pairs_avx512.h).
  bool panel_lut(int64_t p) const { return (fast_[p] & kLutBit) != 0; }
  // A panel_lut panel with no -0 code and every scale >= 9: each nonzero
  // code's looked-up magnitude is at least the scale's subtrahend, so the
  // scaling is one saturating subtraction on the signed pair halves
  // (gemm_pairs_avx512.h, lut_scale).
  bool panel_lut_plain(int64_t p) const { return (fast_[p] & kLutPlainBit) != 0; }
  static constexpr uint8_t kLutBit = 2, kLutPlainBit = 4;

 private:
  static PackedWeight pack_impl(const WeightView& w, bool transposed, const Exec& exec);
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  WFormat fmt_ = WFormat::F32;
  ElemType elem_ = ElemType::E4M3;
  int64_t n_ = 0, k_ = 0, panels_ = 0;
  size_t panel_bytes_ = 0;
  std::unique_ptr<uint8_t[], FreeDeleter> data_;  // 64-byte aligned
  std::vector<uint8_t> mx_scales_;
  std::vector<float> fp8_scales_;
  int64_t group_k_ = 0, k_groups_ = 0;
  std::vector<uint8_t> fast_;
};

// Y[M, N] = X[M, K] * W^T in FP32 under the contract above. X is row-major
// [M][K], Y row-major [M][N]; they must not overlap. M = 0 does nothing; K = 0
// gives zeros.
void gemm(const float* x, int64_t m, const PackedWeight& w, float* y, const Exec& exec = {});

// Exec::pair_kernel (how BF16 and MX weights compute on AVX-512; detail
// below says what each kernel computes). What a request runs as here for a
// kernel call of `rows` rows (gemm() hands the kernels row blocks: all of M
// up to 192 rows; a larger M in blocks of a multiple of 12 rows, the last
// one possibly shorter): Dot, Fma, or Amx when asked
// for and available (Dot where unavailable falls back to Fma; Amx to Auto's
// choice); Auto: pair_kernel_choice()'s kernel for the class of `rows`.
PairKernel resolve_pair_kernel(PairKernel requested, int64_t rows);

// Auto's pair kernel per shape class, chosen once per process, at first use
// (thread-safe), by a micro-benchmark of a few ms: for each class, one small
// fixed GEMM per weight format (BF16 and MX E4M3; "direct": M = 1, N = 512,
// K = 1024; "blocked": M = 48, N = 128, K = 1024) on the calling thread with
// each kernel, alternating, best of 7 after a warm-up; the class takes the
// kernel with the smaller sum over the two formats (a tie: dot). Both compute
// the contract's bits, so the choice changes speed only. Dot is a candidate
// only where the self-test passed; without AVX-512 or AVX512_BF16 nothing is
// measured (fma). MXRL_PAIR_KERNEL=dot or =fma in the environment (read once)
// forces Auto's choice for every class; an explicit request (--kernels)
// overrides both.
struct PairKernelClass {
  const char* name;          // "direct" (the kernels' on-the-fly path), "blocked" (cache-blocked tiles)
  int64_t min_rows, max_rows;  // rows per kernel call; max_rows 0: no bound
  PairKernel kernel;         // Dot or Fma
  double dot_us = -1, fma_us = -1;  // the micro-benchmark's times (sum over formats); -1: not measured
};
struct PairKernelChoice {
  // How the classes were chosen: "measured", "MXRL_PAIR_KERNEL=fma", "no
  // VDPBF16PS: <self-test verdict>", "no AVX-512".
  std::string how;
  std::vector<PairKernelClass> classes;  // direct, blocked
};
const PairKernelChoice& pair_kernel_choice();
// One line for a report: the kernel a request runs as, e.g. "fma", or for
// Auto "auto: dot at 1-6 rows, fma at 7+ rows" (with_times: each class's
// measured times in parentheses). Runs the micro-benchmark if needed.
std::string pair_kernel_summary(PairKernel requested, bool with_times = false);
const char* pair_kernel_name(PairKernel k);  // "auto", "dot", "fma", "amx"
// A pair kernel by name ("auto", "fma", "dot", "amx"; the CLI's --kernels).
// Throws Error for another name or for "dot" / "amx" where this machine
// cannot run it (no silent fallback when asked).
PairKernel pair_kernel_from_name(const std::string& name);

// The plain scalar reference over the unpacked view (loops + std::fma, the
// pair chain spelled out), the ground truth for the tests.
void gemm_reference(const float* x, int64_t m, const WeightView& w, float* y);

// Not the contract: another engine's reduction order, for the foreign-kernel
// fault and the matching experiments. Each output sums K in `splits` partial
// chains over contiguous K ranges (each a sequential FMA chain), then adds the
// partials in order. Same exact operand values as gemm(); different rounding.
// Output columns are cut across `pool` (null: the calling thread).
void gemm_split_k(const float* x, int64_t m, const WeightView& w, float* y, int64_t splits, ThreadPool* pool = nullptr);

namespace detail {
// One entry per backend. run computes rows [m0, m1) x panels [p0, p1) of Y;
// the dispatcher in gemm.cc splits M into blocks of at most about
// `block_rows` (a multiple of `tile_rows`) and (block, panel) pairs over
// threads.
struct GemmKernels {
  void (*run)(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
  int64_t block_rows;
  int64_t tile_rows;
};
extern const GemmKernels kGemmScalar;
// The reference's weight values of panel p as FP32, [k][32] (columns in
// order; out resized to K rows): the scalar backend's decode, and the AVX2
// backend's for panels it does not decode itself.
void panel_values(const PackedWeight& w, int64_t p, std::vector<float>& out);
#if defined(__x86_64__)
extern const GemmKernels kGemmAvx2;  // Backend::Avx2 (gemm_avx2.cc)
extern const GemmKernels kGemmAvx512;
extern const GemmKernels kGemmAmx;        // BF16 and MX weights, PairKernel::Amx only (gemm_amx.cc)
extern const GemmKernels kGemmAvx512Dot;  // kGemmAvx512 with the pair chain on VDPBF16PS
#endif
// The table for exec.backend (resolved with resolve_backend) and, for BF16 and
// MX weights on AVX-512, exec.pair_kernel (resolved with resolve_pair_kernel;
// for Auto with classes that differ, a table that picks per call by its rows).
const GemmKernels& gemm_kernels(const Exec& exec, WFormat f);

inline constexpr uint32_t kGemmNan = 0x7FC00000u;

// The formats under the pair chain.
inline bool pair_contract(WFormat f) { return f == WFormat::BF16 || f == WFormat::MX; }
// The pair chain's scalar pieces (the contract above): x to a BF16 value
// (RNE, DAZ, NaN quieted, as VCVTNE2PS2BF16), a subnormal to a signed zero,
// and one step ftz(fma(daz(x), daz(w), daz(acc))) (the instruction's DAZ; in
// the chain the operands are already BF16 values and the sum never subnormal).
float bf16_dot_round(float x);
float bf16_dot_daz(float x);
float bf16_dot_step(float acc, float x, float w);

// The AVX-512 kernels' direct path takes calls of up to this many rows
// (kDirectRows in gemm_avx512_common.h); more rows take the blocked path.
// Auto's shape classes (pair_kernel_choice) follow it.
inline constexpr int64_t kPairDirectRows = 6;

// How the AVX-512 backend computes the pair chain. Dot: VDPBF16PS, only
// where the CPU has AVX512_BF16 and its instruction passes the self-test (run
// once, at first use; a failure is reported once on stderr). Fma: two FMAs
// per pair. Auto: per shape class, the faster of the two here
// (pair_kernel_choice above).
//
// Amx (only when asked for, never by Auto): AMX TDPBF16PS tiles, NOT the pair
// chain above. The instruction sums 16 pairs per output in an internal order
// and rounding the ISA leaves open, so results differ from the reference (by
// a few ulps of sum |x w|). What it keeps is invariance: the operands are the
// contract's (xb = bf16(x) RNE/DAZ, wb), K is padded with zeros to a multiple
// of 32, and each output is C = 0; for s = 0, 1, ..: C = TDPBF16PS(C, xb[32s
// .. 32s+31], wb[32s .. 32s+31]), one fixed sequence over K whatever M, the
// row's position, the tiling or the thread count. So on one CPU model a row's
// result is bitwise the same in any batch, and learner and sampler agree, but
// a different CPU (or a future microcode) may round differently. TDPBF16PS
// treats BF16 subnormal inputs as zero and flushes subnormal results to zero
// (measured: gemm_test.cc, GemmAmx.FlushesLikeThePairChain), whatever MXCSR says.
// A NaN output is the canonical 0x7FC00000, as on the other paths.
//
// The choice is Exec::pair_kernel (PairKernel in util/cpu.h), per call
// (resolve_pair_kernel above).
// The AMX pair kernel can run here: AVX-512, AMX-TILE, AMX-BF16 and the OS's
// permission for the tile state (request_amx() in util/cpu.h).
bool amx_available();
// The self-test: VDPBF16PS and VCVTNE2PS2BF16 against bf16_dot_step and
// bf16_dot_round on fixed vectors (pair order, denormal inputs and results,
// NaN, infinities, rounding ties). "passed", "failed: ..." or "no AVX512_BF16".
const std::string& bf16_dot_self_test();
// The pair kernels' table-lookup decode of MX E4M3 panels (panel_lut): on
// where the CPU has AVX512_VBMI, unless turned off (a test, a benchmark) to
// run the shift-and-multiply decode it replaces (the same bits).
bool pair_lut_enabled();
void set_pair_lut_enabled(bool on);
#if defined(__x86_64__)
void gemm_pairs_dot(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
// The Amx pair kernel (gemm_amx.cc); only where amx_available().
void gemm_pairs_amx(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1);
void bf16_dot_instruction(float* acc16, const uint32_t* a16, const uint32_t* b16);  // one VDPBF16PS
void bf16_convert_instruction(const float* x32, uint16_t* out32);                   // one VCVTNE2PS2BF16
#endif
}  // namespace detail

}  // namespace mxrl
