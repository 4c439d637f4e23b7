// The scratch memory of one forward pass, sized by the largest batch seen and
// reused across calls, in the manner of gemma.cpp's Activations (llm.c's
// ActivationTensors): a sampler engine, a scorer or a learner owns one, and
// once it has grown forward() allocates nothing. Contents are overwritten by
// every call; nothing in it outlives the call.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace mxrl {

struct PreparedLinear;
// One expert's SwiGLU MLP for moe_experts (model/moe.h): gate/up [F, H], down [H, F].
struct ExpertLinears {
  const PreparedLinear *gate, *up, *down;
};

struct ForwardWorkspace {
  // Residual stream, its normalization, attention [n, H] / [n, q_dim] / [n, kv_dim].
  std::vector<float> x, xn, q, k, v, att, y;
  std::vector<float> scratch;                     // a linear's quantized activations
  std::vector<float> scratch_other;               // those of a linear beside a shared input (forward_same_input)
  std::vector<float> rope_cos, rope_sin;          // [n, head_dim / 2]
  std::vector<std::pair<int64_t, int64_t>> runs;  // attention: (first token, length) per run of a slot
  std::vector<uint8_t> kv_codes;                  // FP8 KV cache: each token's codes [n, kv_dim]
  std::vector<float> kv_scales;                   // and per-head scales [n, kv_heads]
  // MLP and MoE.
  std::vector<float> gate, up;  // [m, F]
  std::vector<float> router_logits, route_weights, expert_x, expert_y, expert_w;
  std::vector<int32_t> experts;
  std::vector<int64_t> expert_rows;
  std::vector<ExpertLinears> expert_linears;  // a MoE layer's experts [E]
  std::vector<float> rows_x;                  // the asked-for rows before the lm_head
};

}  // namespace mxrl
