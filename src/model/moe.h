// The expert part of a sparse MoE block, shared by forward() (model.cc's
// moe(), after the router) and the Python ops (mxrl.ops.MoeExperts), so that
// both run one loop: the same bits wherever the experts run.
#pragma once
#include <cstdint>
#include <span>

#include "model/linear.h"
#include "model/trace.h"
#include "model/workspace.h"  // ExpertLinears

namespace mxrl {

// y[m, H] = sum over the experts e in ascending order of weight * expert_e(x)
// on the rows routed to e: x[m, H] rows, experts/weights[m, top_k] (moe_route's
// output; ids outside [0, linears.size()) route nowhere). Each expert runs
// gate and up on its gathered rows (one activation quantization, as
// forward_same_input), SwiGLU, down, and y accumulates y = y + yr * w
// starting from 0. With `t`, fills t->expert (one ExpertTrace per expert).
void moe_experts(std::span<const ExpertLinears> linears, const float* x, int64_t m, int64_t H, const int32_t* experts,
                 const float* weights, int64_t top_k, float* y, ForwardWorkspace& ws, const Exec& exec,
                 const ForwardOptions& fo = {}, LayerTrace* t = nullptr);

}  // namespace mxrl
