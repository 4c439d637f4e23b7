// What a forward pass records for the backward (learner/backward.h).
#pragma once
#include <cstdint>
#include <vector>

namespace mxrl {

// What a forward pass keeps for the backward (learner/backward.h): every
// layer's inputs and intermediates, FP32, one row per batch token. Keys and
// values (after k_norm and RoPE, as attention used them) stay in the KvCache.
struct ExpertTrace {
  std::vector<int64_t> rows;             // batch rows routed to this expert, ascending
  std::vector<float> weight;             // their routing weights [rows]
  std::vector<float> x, gate, up, h, y;  // x[rows, H], gate/up/h[rows, F], y[rows, H] (before weighting)
};
struct LayerTrace {
  std::vector<float> x_in, xn1;      // residual stream in, after input_layernorm [n, H]
  std::vector<float> q_raw, k_raw;   // q/k projections before q_norm/k_norm [n, q_dim], [n, kv_dim]
  std::vector<float> q;              // after q_norm and RoPE [n, q_dim]
  std::vector<float> att;            // attention output, o_proj's input [n, q_dim]
  std::vector<float> x_mid, xn2;     // residual after attention, after post_attention_layernorm [n, H]
  std::vector<float> gate, up, h;    // dense MLP [n, F]
  std::vector<float> router_logits;  // MoE [n, E]
  std::vector<int32_t> experts;      // MoE [n, top_k]
  std::vector<float> weights;        // MoE [n, top_k]
  std::vector<ExpertTrace> expert;   // MoE, per expert
};
struct ForwardTrace {
  std::vector<LayerTrace> layers;
  std::vector<float> x_final, xn_final;  // before and after the final norm [n, H]
};

}  // namespace mxrl
