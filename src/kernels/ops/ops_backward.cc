// Dispatch of the backward ops to the scalar or AVX-512 build of
// ops_backward_impl.h (the two agree bit for bit; ops_backward_test checks).
#include "kernels/ops/ops_backward.h"

#include "kernels/ops/ops_kernels.h"

namespace mxrl {

namespace detail {
const OpsBackwardKernels& ops_backward_kernels(Backend b) {
  return backend_table(b, kOpsBackwardScalar, MXRL_AVX2(kOpsBackwardAvx2), MXRL_AVX512(kOpsBackwardAvx512));
}
}  // namespace detail

void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t n, int64_t dim,
                        const Exec& exec) {
  detail::ops_backward_kernels(exec.backend).embedding(dtable, dout, tokens, n, dim);
}
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t rows, int64_t dim,
                      float eps, const Exec& exec) {
  detail::ops_backward_kernels(exec.backend).rmsnorm(dx, dw, dy, x, w, rows, dim, eps);
}
void rope_backward(float* dx, int64_t heads, int64_t head_dim, const float* cos, const float* sin, const Exec& exec) {
  detail::ops_backward_kernels(exec.backend).rope(dx, heads, head_dim, cos, sin);
}
void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n,
                     const Exec& exec) {
  detail::ops_backward_kernels(exec.backend).swiglu(dgate, dup, dh, gate, up, n);
}
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, int64_t npos, int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd,
                        float scale, float* scores, const Exec& exec) {
  detail::ops_backward_kernels(exec.backend)
      .attention(dq, dk, dv, dout, q, k, v, npos, kv_stride, heads, kv_heads, hd, scale, scores);
}
void attention_backward_group(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T,
                              int64_t p0, const float* kg, const float* vg, int64_t kv_stride, int64_t dkv_stride,
                              int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale, const Exec& exec) {
  detail::ops_backward_kernels(exec.backend)
      .attention_group(dq, dkg, dvg, dout, q, T, p0, kg, vg, kv_stride, dkv_stride, heads, kv_heads, hd, g, scale);
}
void log_softmax_gather_backward(float* dlogits, const float* logits, const int32_t* targets, const float* dlogp,
                                 int64_t rows, int64_t n, const Exec& exec) {
  detail::ops_backward_kernels(exec.backend).log_softmax_gather(dlogits, logits, targets, dlogp, rows, n);
}
void softmax_backward(float* dx, const float* y, const float* dy, int64_t rows, int64_t n, const Exec& exec) {
  detail::ops_backward_kernels(exec.backend).softmax(dx, y, dy, rows, n);
}
void moe_route_backward(float* dlogits, const float* logits, const int32_t* experts, const float* dweights,
                        int64_t rows, int64_t num_experts, int64_t k, bool renormalize, const Exec& exec) {
  detail::ops_backward_kernels(exec.backend)
      .moe_route(dlogits, logits, experts, dweights, rows, num_experts, k, renormalize);
}

}  // namespace mxrl
