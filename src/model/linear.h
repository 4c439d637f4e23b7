// A linear layer prepared under its precision: the forward weights it
// computes with (held as shipped: FP32, BF16 bits, MX codes + E8M0 scales,
// or FP8 codes + FP32 scales), packed for the GEMM, and the matching
// per-token activation quantization.
//
// Weights of every precision but fp32 come from the compute copy: the BF16
// rounding of the FP32 master (docs/reference.md §4). MX weights are its row (1x32 along
// K) quantization: the learner's forward weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gemm/gemm.h"
#include "model/plan.h"

namespace mxrl {

// How a forward pass departs from the contract, as another engine would: the
// sampler's own options (EngineOptions::forward, sampler/engine.h); {}
// everywhere else. gemm_split_k > 1: the linears sum K in that many partial
// chains (gemm_split_k of kernels/gemm/gemm.h) instead of the contract's order.
// kv_unit_scale: an FP8 KV cache is written with a static scale of 1.0
// instead of each token's amax / 448 (calibrated KV scales missing).
struct ForwardOptions {
  int gemm_split_k = 0;
  bool kv_unit_scale = false;
};

struct PreparedLinear {
  std::string name;
  LinearPrecision prec;
  int64_t n = 0, k = 0;
  std::vector<float> f32;          // FP32
  std::vector<uint16_t> bf16;      // BF16
  std::vector<uint8_t> codes;      // MXFP8 / FP8
  std::vector<uint8_t> mx_scales;  // MXFP8: [n][k/32]
  std::vector<float> fp8_scales;   // FP8
  PackedWeight packed;

  // From FP32 master weights w[n, k]; throws naming the tensor when the
  // shape does not suit the precision (MX needs k % 32 == 0).
  static PreparedLinear prepare(const std::string& name, const float* w, int64_t n, int64_t k,
                                const LinearPrecision& prec, const Exec& exec);
  WeightView view() const;
  // The same forward weights, unpacked (what a sync ships).
  PreparedLinear payload() const;
  // Checks the payload against (n, k, precision) and packs it; throws naming the tensor.
  void validate_and_pack(const Exec& exec);

  // y[m, n] = quantize_activations(x[m, k]) * W^T. scratch holds m*k floats.
  void forward(const float* x, int64_t m, float* y, std::vector<float>& scratch, const Exec& exec,
               const ForwardOptions& fo = {}) const;
  // forward() in two steps, so that linears reading the same x (q, k, v; gate,
  // up) quantize it once: gemm_input is x as this linear's GEMM multiplies it
  // (its activation quantization in `scratch`, or x itself where there is
  // none to make), multiply takes gemm_input's result of any linear with
  // same_activations(). forward(x) = multiply(gemm_input(x)), bit for bit.
  const float* gemm_input(const float* x, int64_t m, std::vector<float>& scratch, const Exec& exec,
                          const ForwardOptions& fo = {}) const;
  void multiply(const float* in, int64_t m, float* y, const Exec& exec, const ForwardOptions& fo = {}) const;
  bool same_activations(const PreparedLinear& o) const { return prec == o.prec && k == o.k; }
};

// The activations a linear of this precision actually multiplies: x rounded
// to BF16, or MX/FP8 quantized per token and dequantized (exact for MX).
void quantize_activations(const float* x, int64_t m, int64_t k, const LinearPrecision& prec, float* out,
                          const Exec& exec);

}  // namespace mxrl
