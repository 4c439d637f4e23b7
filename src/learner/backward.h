// The hand-written backward pass of a Qwen3 / Qwen3-MoE model, mirroring
// model.cc's forward in reverse (llm.c style: one _backward per op, called in
// the opposite order of the forward). Gradients flow straight through every
// quantization (the STE) and reach the FP32 master weights: the gradient of a
// BF16 compute copy or an MX forward weight is the master's.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/gemm/gemm.h"
#include "model/forward.h"

namespace mxrl {

// The dgrad weights of every linear (W^T in the linear's precision; MX: the
// col quantization of the compute copy), by parameter-table index. Made once
// per optimizer step from the masters (or every micro-batch, to measure it).
struct BackwardWeights {
  std::vector<PackedWeight> wt;  // [entries]; empty for non-linears
  static BackwardWeights prepare(const ParamTable& masters, const PrecisionPlan& plan, const Exec& exec = {});
};

struct BackwardOptions {
  ElemType grad_elem = ElemType::E4M3;  // MX gradient element type (E5M2: the hybrid recipe)
  // MoE load-balancing loss (as HF's load_balancing_loss_func over this
  // call's tokens and MoE layers): coef * E * sum_e f_e P_e. 0: off.
  double aux_loss_coef = 0.0;
  double aux_loss_weight = 1.0;  // this call's share of the step's aux loss
};

// The batch must be whole sequences, each one slot's positions 0..len-1 in
// consecutive rows (what the learner packs). Adds d(loss)/d(params) into
// grads[layout.numel()], given dlogits[n, vocab] of the traced forward pass
// that filled `cache` and `trace`. Returns the aux loss value (0 when off).
// Bitwise deterministic: independent of the thread count.
// The backward's scratch, reused across calls like forward()'s workspace: a
// learner owns one, and once it has grown backward() allocates nothing of its
// own (the backward GEMMs' operand copies are linear_grad's).
struct BackwardWorkspace {
  std::vector<float> rope_cos, rope_sin;  // [n, head_dim / 2]
  std::vector<float> dx, dxn, tmp;        // [n, H]
  std::vector<float> dq, dk, dv, datt, dq_raw, dk_raw;
  std::vector<float> dh, dg, du;                                       // an MLP's [m, F]
  std::vector<float> dweights, dye, dxe, dlog, probs, aux_grad, daux;  // MoE
  std::vector<double> count, psum;                                     // MoE aux loss statistics [E]
  std::vector<std::pair<int64_t, int64_t>> seqs;                       // (first row, length)
};

double backward(const Model& model, const ParamTable& layout, const BackwardWeights& bw, const KvCache& cache,
                const TokenBatch& batch, const ForwardTrace& trace, const float* dlogits, float* grads,
                const BackwardOptions& opt, const Exec& exec = {}, BackwardWorkspace* workspace = nullptr);

}  // namespace mxrl
