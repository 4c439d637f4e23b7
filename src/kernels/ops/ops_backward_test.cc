#include "kernels/ops/ops_backward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops/ops.h"
#include "kernels/ops/ops_kernels.h"
#include "numerics/formats.h"
#include "testing/kv_layout.h"

// Gradient checks: each op's FP32 backward, given an upstream gradient r,
// against central differences of a double-precision reference forward of
// L = sum(r * out) at the same (FP32) inputs.

namespace mxrl {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

constexpr double kTol = 1e-4;  // max|analytic - numeric| / max|numeric|

DVec to_d(const Vec& v) { return DVec(v.begin(), v.end()); }

Vec normal(std::mt19937& rng, size_t n, float sd = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> nd(mean, sd);
  Vec v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Central differences of f() w.r.t. each x[i] (x perturbed in place and restored).
DVec numeric_grad(DVec& x, const std::function<double()>& f) {
  DVec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i], h = 1e-5 * std::max(1.0, std::fabs(x0));
    x[i] = x0 + h;
    const double fp = f();
    x[i] = x0 - h;
    const double fm = f();
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// max|a - ref| / max|ref|, printed; ref must be non-trivial.
double rel_err(const std::string& what, const Vec& a, const DVec& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - ref[i]));
    den = std::max(den, std::fabs(ref[i]));
  }
  EXPECT_GT(den, 1e-3) << what << ": trivial reference gradient";
  const double e = num / den;
  std::printf("[grad] %-32s max|ref| %.3g  rel err %.3g\n", what.c_str(), den, e);
  return e;
}

double weighted(const DVec& r, const DVec& out) {
  double L = 0;
  for (size_t i = 0; i < out.size(); ++i) L += r[i] * out[i];
  return L;
}

// ---------------------------------------------------------------- embedding

TEST(EmbeddingBackward, GradientCheckAndRepeatedTokensAccumulateInOrder) {
  std::mt19937 rng(11);
  const int64_t V = 7, dim = 5, n = 12;
  const std::vector<int32_t> tok = {3, 0, 3, 6, 1, 3, 0, 2, 6, 3, 5, 1};  // 3 four times, 4 never
  DVec table = to_d(normal(rng, V * dim));
  const Vec r = normal(rng, n * dim);
  const DVec rd = to_d(r);
  auto L = [&] {
    DVec out(n * dim);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < dim; ++c) out[i * dim + c] = table[tok[i] * dim + c];
    return weighted(rd, out);
  };
  const DVec ref = numeric_grad(table, L);
  Vec dtable(V * dim, 0.0f);
  embedding_backward(dtable.data(), r.data(), tok.data(), n, dim);
  EXPECT_LT(rel_err("embedding dtable", dtable, ref), kTol);

  // Added to a prefilled table, rows summed in position order; unused rows untouched.
  const Vec pre = normal(rng, V * dim);
  Vec acc = pre, expect = pre;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < dim; ++c) expect[tok[i] * dim + c] = expect[tok[i] * dim + c] + r[i * dim + c];
  embedding_backward(acc.data(), r.data(), tok.data(), n, dim);
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_EQ(f32_bits(acc[i]), f32_bits(expect[i])) << i;
  for (int64_t c = 0; c < dim; ++c) EXPECT_EQ(f32_bits(acc[4 * dim + c]), f32_bits(pre[4 * dim + c]));
}

// ---------------------------------------------------------------- rmsnorm

TEST(RmsNormBackward, GradientCheckAndDwAccumulatesOverRows) {
  std::mt19937 rng(12);
  const int64_t rows = 3, dim = 48;
  const float eps = 1e-6f;
  Vec x = normal(rng, rows * dim, 2.0f, 0.3f), w = normal(rng, dim, 0.3f, 1.0f);
  for (int64_t i = 0; i < dim; ++i) x[dim + i] *= 0.01f;  // a small-norm row
  const Vec r = normal(rng, rows * dim);
  DVec xd = to_d(x), wd = to_d(w);
  const DVec rd = to_d(r);
  auto L = [&] {
    DVec y(rows * dim);
    for (int64_t row = 0; row < rows; ++row) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += xd[row * dim + i] * xd[row * dim + i];
      const double inv = 1 / std::sqrt(ss / dim + double(eps));
      for (int64_t i = 0; i < dim; ++i) y[row * dim + i] = wd[i] * xd[row * dim + i] * inv;
    }
    return weighted(rd, y);
  };
  const DVec ref_dx = numeric_grad(xd, L), ref_dw = numeric_grad(wd, L);
  Vec dx(rows * dim), dw(dim, 0.0f);
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rows, dim, eps);
  EXPECT_LT(rel_err("rmsnorm dx", dx, ref_dx), kTol);
  EXPECT_LT(rel_err("rmsnorm dw", dw, ref_dw), kTol);
  // dx scales as 1/|x_row|, so the small-norm row dominates: check row 0 on its own scale too.
  EXPECT_LT(rel_err("rmsnorm dx (row 0 alone)", Vec(dx.begin(), dx.begin() + dim),
                    DVec(ref_dx.begin(), ref_dx.begin() + dim)),
            kTol);

  // dw is added to: prefilled, and row by row in separate calls = all rows in one call.
  const Vec pre = normal(rng, dim);
  Vec dw_pre = pre, dw_rows = pre, dx2(rows * dim);
  rmsnorm_backward(dx2.data(), dw_pre.data(), r.data(), x.data(), w.data(), rows, dim, eps);
  for (int64_t i = 0; i < dim; ++i) EXPECT_NEAR(dw_pre[i], pre[i] + dw[i], 1e-5f * (1 + std::fabs(dw[i])));
  for (int64_t row = 0; row < rows; ++row)
    rmsnorm_backward(dx2.data() + row * dim, dw_rows.data(), r.data() + row * dim, x.data() + row * dim, w.data(), 1,
                     dim, eps);
  for (int64_t i = 0; i < dim; ++i) EXPECT_EQ(f32_bits(dw_rows[i]), f32_bits(dw_pre[i])) << i;
  for (int64_t i = 0; i < rows * dim; ++i) EXPECT_EQ(f32_bits(dx2[i]), f32_bits(dx[i])) << i;
  // dw == nullptr: dx alone, the same.
  rmsnorm_backward(dx2.data(), nullptr, r.data(), x.data(), w.data(), rows, dim, eps);
  for (int64_t i = 0; i < rows * dim; ++i) EXPECT_EQ(f32_bits(dx2[i]), f32_bits(dx[i])) << i;
}

// ---------------------------------------------------------------- rope

TEST(RopeBackward, GradientCheckAndInvertsTheForward) {
  std::mt19937 rng(13);
  const int64_t heads = 3, hd = 16, half = hd / 2;
  const RopeTable t = RopeTable::make(hd, 10000.0);
  Vec c(half), s(half);
  t.angles(13, c.data(), s.data());
  const Vec x = normal(rng, heads * hd), r = normal(rng, heads * hd);
  DVec xd = to_d(x);
  const DVec rd = to_d(r);
  auto L = [&] {
    DVec y(heads * hd);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double x1 = xd[h * hd + i], x2 = xd[h * hd + i + half];
        y[h * hd + i] = x1 * c[i] - x2 * s[i];
        y[h * hd + i + half] = x2 * c[i] + x1 * s[i];
      }
    return weighted(rd, y);
  };
  const DVec ref = numeric_grad(xd, L);
  Vec dx = r;
  rope_backward(dx.data(), heads, hd, c.data(), s.data());
  EXPECT_LT(rel_err("rope dx", dx, ref), kTol);
  // A rotation: the backward undoes the forward (up to rounding).
  Vec y = x;
  rope_forward(y.data(), heads, hd, c.data(), s.data());
  rope_backward(y.data(), heads, hd, c.data(), s.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-6f * (1 + std::fabs(x[i])));
}

// ---------------------------------------------------------------- swiglu

TEST(SwigluBackward, GradientCheck) {
  std::mt19937 rng(14);
  const int64_t n = 64;
  Vec gate = normal(rng, n, 3.0f), up = normal(rng, n);
  gate[0] = 12.0f;
  gate[1] = -12.0f;
  gate[2] = 0.0f;
  const Vec r = normal(rng, n);
  DVec gd = to_d(gate), ud = to_d(up);
  const DVec rd = to_d(r);
  auto L = [&] {
    DVec h(n);
    for (int64_t i = 0; i < n; ++i) h[i] = gd[i] / (1 + std::exp(-gd[i])) * ud[i];
    return weighted(rd, h);
  };
  const DVec ref_g = numeric_grad(gd, L), ref_u = numeric_grad(ud, L);
  Vec dgate(n), dup(n);
  swiglu_backward(dgate.data(), dup.data(), r.data(), gate.data(), up.data(), n);
  EXPECT_LT(rel_err("swiglu dgate", dgate, ref_g), kTol);
  EXPECT_LT(rel_err("swiglu dup", dup, ref_u), kTol);
  // In place over dh gives the same.
  Vec dh = r, dup2(n);
  swiglu_backward(dh.data(), dup2.data(), dh.data(), gate.data(), up.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f32_bits(dh[i]), f32_bits(dgate[i]));
}

// ---------------------------------------------------------------- attention

void attention_gradient_check(int64_t npos, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t heads = 4, kvh = 2, hd = 8, stride = kvh * hd + 3, group = heads / kvh;
  const float scale = 1.0f / std::sqrt(float(hd));
  const Vec q = normal(rng, heads * hd, 1.5f), k = normal(rng, npos * stride), v = normal(rng, npos * stride);
  const Vec r = normal(rng, heads * hd);
  DVec qd = to_d(q), kd = to_d(k), vd = to_d(v);
  const DVec rd = to_d(r);
  auto L = [&] {
    DVec out(heads * hd, 0.0);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      DVec p(npos);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < npos; ++j) {
        double sc = 0;
        for (int64_t d = 0; d < hd; ++d) sc += qd[h * hd + d] * kd[j * stride + g * hd + d];
        p[j] = sc * double(scale);
        mx = std::max(mx, p[j]);
      }
      for (auto& x : p) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < npos; ++j)
        for (int64_t d = 0; d < hd; ++d) out[h * hd + d] += p[j] / sum * vd[j * stride + g * hd + d];
    }
    return weighted(rd, out);
  };
  const DVec ref_q = numeric_grad(qd, L), ref_k = numeric_grad(kd, L), ref_v = numeric_grad(vd, L);
  Vec dq(heads * hd, NAN), dk(npos * stride, 0.0f), dv(npos * stride, 0.0f), scores(npos);
  attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(), npos, stride, heads, kvh,
                     hd, scale, scores.data());
  const std::string tag = " (npos " + std::to_string(npos) + ")";
  if (npos == 1) {  // p = 1 whatever q and k: dq and dk exactly zero
    for (float x : dq) EXPECT_EQ(x, 0.0f);
    for (float x : dk) EXPECT_EQ(x, 0.0f);
    for (double x : ref_q) EXPECT_EQ(x, 0.0);
  } else {
    EXPECT_LT(rel_err("attention dq" + tag, dq, ref_q), kTol);
    EXPECT_LT(rel_err("attention dk" + tag, dk, ref_k), kTol);
  }
  EXPECT_LT(rel_err("attention dv" + tag, dv, ref_v), kTol);

  // dk/dv are added to; the kv_stride padding is never touched.
  const Vec pk = normal(rng, npos * stride), pv = normal(rng, npos * stride);
  Vec dk2 = pk, dv2 = pv, dq2(heads * hd);
  attention_backward(dq2.data(), dk2.data(), dv2.data(), r.data(), q.data(), k.data(), v.data(), npos, stride, heads,
                     kvh, hd, scale, scores.data());
  for (int64_t i = 0; i < heads * hd; ++i) EXPECT_EQ(f32_bits(dq2[i]), f32_bits(dq[i]));
  for (int64_t i = 0; i < npos * stride; ++i) {
    if (i % stride >= kvh * hd) {
      EXPECT_EQ(f32_bits(dk2[i]), f32_bits(pk[i])) << "padding " << i;
      EXPECT_EQ(f32_bits(dv2[i]), f32_bits(pv[i])) << "padding " << i;
    } else {
      EXPECT_NEAR(dk2[i], pk[i] + dk[i], 1e-6f * (1 + std::fabs(pk[i]) + std::fabs(dk[i]))) << i;
      EXPECT_NEAR(dv2[i], pv[i] + dv[i], 1e-6f * (1 + std::fabs(pv[i]) + std::fabs(dv[i]))) << i;
    }
  }
}

TEST(AttentionBackward, GradientCheckGroupedHeadsSeveralChunks) {
  attention_gradient_check(1, 21);
  attention_gradient_check(5, 22);
  attention_gradient_check(16, 23);
  attention_gradient_check(17, 24);
  attention_gradient_check(40, 25);
}

// The probabilities the backward uses are bit for bit those of attention_forward:
// the forward with v = e_0 at key j alone gives out_h[0] = p_hj exactly (fma of
// zeros), the backward with dout = e_(h,0) and dv = 0 gives dv_j[g*hd] = fma(p_hj, 1, 0).
TEST(AttentionBackward, RecomputedProbabilitiesAreBitwiseTheForwards) {
  std::mt19937 rng(26);
  const int64_t heads = 4, kvh = 2, hd = 8, stride = kvh * hd + 3, group = heads / kvh, npos = 40;
  const float scale = 1.0f / std::sqrt(float(hd));
  const Vec q = normal(rng, heads * hd, 3.0f), k = normal(rng, npos * stride), v = normal(rng, npos * stride);
  std::vector<Vec> pf(heads, Vec(npos));  // from the (dispatched) forward
  Vec out(heads * hd), scores(npos);
  for (int64_t j = 0; j < npos; ++j) {
    Vec e(npos * stride, 0.0f);
    for (int64_t g = 0; g < kvh; ++g) e[j * stride + g * hd] = 1.0f;
    attention_forward(out.data(), q.data(), k.data(), e.data(), npos, stride, heads, kvh, hd, scale, scores.data());
    for (int64_t h = 0; h < heads; ++h) pf[h][j] = out[h * hd];
  }
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / group;
    // The shared function, both builds.
    Vec p(npos);
    detail::kOpsScalar.attention_probs(p.data(), q.data() + h * hd, k.data() + g * hd, npos, stride, hd, scale);
    for (int64_t j = 0; j < npos; ++j) EXPECT_EQ(f32_bits(p[j]), f32_bits(pf[h][j])) << h << " " << j;
    if (cpu_features().avx2) {
      detail::kOpsAvx2.attention_probs(p.data(), q.data() + h * hd, k.data() + g * hd, npos, stride, hd, scale);
      for (int64_t j = 0; j < npos; ++j) EXPECT_EQ(f32_bits(p[j]), f32_bits(pf[h][j])) << h << " " << j;
    }
    if (cpu_features().avx512) {
      detail::kOpsAvx512.attention_probs(p.data(), q.data() + h * hd, k.data() + g * hd, npos, stride, hd, scale);
      for (int64_t j = 0; j < npos; ++j) EXPECT_EQ(f32_bits(p[j]), f32_bits(pf[h][j])) << h << " " << j;
    }
    // Through the backward.
    Vec dout(heads * hd, 0.0f), dq(heads * hd), dk(npos * stride, 0.0f), dv(npos * stride, 0.0f);
    dout[h * hd] = 1.0f;
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), npos, stride, heads,
                       kvh, hd, scale, scores.data());
    for (int64_t j = 0; j < npos; ++j)
      EXPECT_EQ(f32_bits(dv[j * stride + g * hd]), f32_bits(pf[h][j])) << h << " " << j;
    double psum = 0;
    for (float x : pf[h]) psum += x;
    EXPECT_NEAR(psum, 1.0, 1e-5);
  }
}

// ---------------------------------------------------------------- log-softmax gather

TEST(LogSoftmaxGatherBackward, GradientCheckRowsSumToZeroAndZeroRows) {
  std::mt19937 rng(31);
  const int64_t rows = 6, n = 50;
  const Vec logits = normal(rng, rows * n, 3.0f);
  std::vector<int32_t> targets(rows);
  for (auto& t : targets) t = int32_t(rng() % n);
  Vec dlogp = normal(rng, rows);
  dlogp[2] = 0.0f;
  dlogp[5] = -0.0f;
  DVec ld = to_d(logits);
  const DVec rd = to_d(dlogp);
  auto L = [&] {
    DVec out(rows);
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, ld[r * n + i]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(ld[r * n + i] - mx);
      out[r] = ld[r * n + targets[r]] - mx - std::log(sum);
    }
    return weighted(rd, out);
  };
  const DVec ref = numeric_grad(ld, L);
  Vec dl(rows * n, NAN);
  log_softmax_gather_backward(dl.data(), logits.data(), targets.data(), dlogp.data(), rows, n);
  EXPECT_LT(rel_err("log_softmax_gather dlogits", dl, ref), kTol);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += dl[r * n + i];
    EXPECT_NEAR(s, 0.0, 1e-6 * (1 + std::fabs(dlogp[r]))) << r;
    if (dlogp[r] == 0.0f) {
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(f32_bits(dl[r * n + i]), 0u) << r << " " << i;
    }
  }
  // softmax_i = -dlogits_i / dlogp off the target, against the forward's own log-softmax.
  Vec lsm(rows * n);
  log_softmax_forward(lsm.data(), logits.data(), rows, n);
  for (int64_t i = 0; i < n; ++i) {
    if (i == targets[0]) continue;
    EXPECT_NEAR(-dl[i] / dlogp[0], std::exp(double(lsm[i])), 1e-6);
  }
}

// ---------------------------------------------------------------- softmax

TEST(SoftmaxBackward, GradientCheckAndInPlace) {
  std::mt19937 rng(41);
  const int64_t rows = 3, n = 37;
  const Vec x = normal(rng, rows * n, 2.0f), r = normal(rng, rows * n);
  Vec y = x;
  softmax_forward(y.data(), rows, n);
  DVec xd = to_d(x);
  const DVec rd = to_d(r);
  auto L = [&] {
    DVec out(rows * n);
    for (int64_t row = 0; row < rows; ++row) {
      double mx = -1e300, sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xd[row * n + i]);
      for (int64_t i = 0; i < n; ++i) sum += (out[row * n + i] = std::exp(xd[row * n + i] - mx));
      for (int64_t i = 0; i < n; ++i) out[row * n + i] /= sum;
    }
    return weighted(rd, out);
  };
  const DVec ref = numeric_grad(xd, L);
  Vec dx(rows * n, NAN);
  softmax_backward(dx.data(), y.data(), r.data(), rows, n);
  EXPECT_LT(rel_err("softmax dx", dx, ref), kTol);
  for (int64_t row = 0; row < rows; ++row) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += dx[row * n + i];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
  Vec inplace = r;
  softmax_backward(inplace.data(), y.data(), inplace.data(), rows, n);
  for (int64_t i = 0; i < rows * n; ++i) EXPECT_EQ(f32_bits(inplace[i]), f32_bits(dx[i]));
}

// ---------------------------------------------------------------- MoE routing

void moe_gradient_check(bool renormalize, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t rows = 5, E = 8, k = 2;
  // Logits without near-ties: a shuffled ladder 0.4 apart plus small noise.
  Vec logits(rows * E);
  std::uniform_real_distribution<float> noise(-0.05f, 0.05f);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t e = 0; e < E; ++e) logits[r * E + e] = 0.4f * perm[e] - 1.5f + noise(rng);
  }
  std::vector<int32_t> experts(rows * k);
  Vec weights(rows * k);
  moe_route(experts.data(), weights.data(), logits.data(), rows, E, k, renormalize);
  const Vec r = normal(rng, rows * k);
  DVec ld = to_d(logits);
  const DVec rd = to_d(r);
  auto L = [&] {  // the choice held fixed
    DVec w(rows * k);
    for (int64_t row = 0; row < rows; ++row) {
      double mx = -1e300, sum = 0;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, ld[row * E + e]);
      DVec p(E);
      for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(ld[row * E + e] - mx));
      for (auto& x : p) x /= sum;
      double S = 0;
      for (int64_t j = 0; j < k; ++j) S += p[experts[row * k + j]];
      for (int64_t j = 0; j < k; ++j) w[row * k + j] = p[experts[row * k + j]] / (renormalize ? S : 1.0);
    }
    return weighted(rd, w);
  };
  const DVec ref = numeric_grad(ld, L);
  Vec dl(rows * E, NAN);
  moe_route_backward(dl.data(), logits.data(), experts.data(), r.data(), rows, E, k, renormalize);
  EXPECT_LT(rel_err(std::string("moe_route dlogits") + (renormalize ? " (renorm)" : ""), dl, ref), kTol);
  for (int64_t row = 0; row < rows; ++row) {
    double s = 0;
    for (int64_t e = 0; e < E; ++e) s += dl[row * E + e];
    EXPECT_NEAR(s, 0.0, 1e-6);
  }
}

TEST(MoeRouteBackward, GradientCheckPlainAndRenormalized) {
  moe_gradient_check(false, 51);
  moe_gradient_check(true, 52);
}

TEST(MoeRouteBackward, SingleRenormalizedExpertHasZeroGradient) {
  const float logits[4] = {0.3f, -1.0f, 2.0f, 0.5f};
  int32_t e;
  float w;
  moe_route(&e, &w, logits, 1, 4, 1, true);
  EXPECT_EQ(e, 2);
  EXPECT_EQ(w, 1.0f);
  const float dw = 0.7f;
  float dl[4];
  moe_route_backward(dl, logits, &e, &dw, 1, 4, 1, true);
  for (float x : dl) EXPECT_EQ(x, 0.0f);
}

// The backward of a run, one KV group at a time, on every backend, equals the
// per-token scalar reference called in token order (dk/dv accumulate in the
// same order) bit for bit, with keys and values in rows or in a cache's
// per-group histories.
TEST(OpsBackwardBackends, AttentionGroupEqualsPerTokenReference) {
  std::vector<const detail::OpsBackwardKernels*> tables = {&detail::kOpsBackwardScalar};
  if (cpu_features().avx2) tables.push_back(&detail::kOpsBackwardAvx2);
  if (cpu_features().avx512) tables.push_back(&detail::kOpsBackwardAvx512);
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Case {
    int64_t heads, kvh, hd, T, p0;
    float scale;
  };
  const Case cases[] = {{4, 2, 32, 37, 0, 0.18f},
                        {8, 2, 32, 5, 11, 0.18f},
                        {2, 2, 128, 20, 0, 0.09f},
                        {6, 3, 48, 9, 2, 0.14f},
                        {4, 1, 16, 33, 0, 6.0f},
                        // groups of 6 (heads in blocks of 4 + 2), 8 (4 + 4) and 3 (2 + 1); hd 128 with 4 heads
                        {12, 2, 32, 7, 3, 0.2f},
                        {8, 1, 16, 5, 0, 0.3f},
                        {3, 1, 32, 6, 1, 0.2f},
                        {8, 2, 128, 4, 2, 0.09f}};
  for (const Case& cs : cases) {
    const int64_t n = cs.p0 + cs.T, stride = cs.kvh * cs.hd, qd = cs.heads * cs.hd;
    auto rnd = [&](size_t m) {
      std::vector<float> x(m);
      for (float& f : x) f = nd(rng);
      return x;
    };
    const auto q = rnd(cs.T * qd), k = rnd(n * stride), v = rnd(n * stride), dout = rnd(cs.T * qd);
    const auto dk0 = rnd(n * stride), dv0 = rnd(n * stride);
    std::vector<float> dq_ref(cs.T * qd), dk_ref = dk0, dv_ref = dv0, scores(n);
    for (int64_t t = 0; t < cs.T; ++t)
      detail::kOpsBackwardScalar.attention(&dq_ref[t * qd], dk_ref.data(), dv_ref.data(), &dout[t * qd], &q[t * qd],
                                           k.data(), v.data(), cs.p0 + t + 1, stride, cs.heads, cs.kvh, cs.hd, cs.scale,
                                           scores.data());
    // Keys and values also as a KvCache holds them ([group][pos][hd], stride
    // hd) while dk/dv stay [pos][kv_heads * hd] rows: the learner's case.
    const auto kg = test::group_histories(k, n, cs.kvh, cs.hd, stride);
    const auto vg = test::group_histories(v, n, cs.kvh, cs.hd, stride);
    for (const auto* tab : tables)
      for (const bool grouped : {false, true}) {
        std::vector<float> dq(cs.T * qd, 5.0f), dk = dk0, dv = dv0;
        for (int64_t g = 0; g < cs.kvh; ++g)
          if (grouped)
            tab->attention_group(dq.data(), &dk[g * cs.hd], &dv[g * cs.hd], dout.data(), q.data(), cs.T, cs.p0,
                                 &kg[g * n * cs.hd], &vg[g * n * cs.hd], cs.hd, stride, cs.heads, cs.kvh, cs.hd, g,
                                 cs.scale);
          else
            tab->attention_group(dq.data(), &dk[g * cs.hd], &dv[g * cs.hd], dout.data(), q.data(), cs.T, cs.p0,
                                 &k[g * cs.hd], &v[g * cs.hd], stride, stride, cs.heads, cs.kvh, cs.hd, g, cs.scale);
        const std::string name = std::string(tab == &detail::kOpsBackwardScalar ? "scalar"
                                             : tab == &detail::kOpsBackwardAvx2 ? "avx2"
                                                                                : "avx512") +
                                 (grouped ? " grouped" : " rows");
        for (size_t i = 0; i < dq.size(); ++i) ASSERT_EQ(f32_bits(dq[i]), f32_bits(dq_ref[i])) << name << " dq " << i;
        for (size_t i = 0; i < dk.size(); ++i) ASSERT_EQ(f32_bits(dk[i]), f32_bits(dk_ref[i])) << name << " dk " << i;
        for (size_t i = 0; i < dv.size(); ++i) ASSERT_EQ(f32_bits(dv[i]), f32_bits(dv_ref[i])) << name << " dv " << i;
      }
  }
}

// The AVX2 and AVX-512 builds of every backward op equal the scalar build bit for bit.
void expect_backward_build_matches_scalar(const detail::OpsBackwardKernels& b, const char* name) {
  SCOPED_TRACE(name);
  const auto& a = detail::kOpsBackwardScalar;
  std::mt19937 rng(77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
  };
  auto same = [](const std::vector<float>& x, const std::vector<float>& y, const char* what) {
    ASSERT_EQ(x.size(), y.size()) << what;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(f32_bits(x[i]), f32_bits(y[i])) << what << " " << i;
  };
  const int64_t rows = 7, dim = 80, heads = 4, kvh = 2, hd = 16, npos = 37, stride = kvh * hd, E = 8, K = 2, V = 50;
  for (const int64_t d : {dim, int64_t(83), int64_t(7)}) {  // rmsnorm, with and without a tail
    const auto x = rnd(rows * d), w = rnd(d), dy = rnd(rows * d);
    std::vector<float> dx1(rows * d), dx2(rows * d), dw1 = rnd(d), dw2 = dw1;
    a.rmsnorm(dx1.data(), dw1.data(), dy.data(), x.data(), w.data(), rows, d, 1e-6f);
    b.rmsnorm(dx2.data(), dw2.data(), dy.data(), x.data(), w.data(), rows, d, 1e-6f);
    same(dx1, dx2, "rmsnorm dx");
    same(dw1, dw2, "rmsnorm dw");
    a.rmsnorm(dx1.data(), nullptr, dy.data(), x.data(), w.data(), rows, d, 1e-6f);  // dw null: no weight gradient
    b.rmsnorm(dx2.data(), nullptr, dy.data(), x.data(), w.data(), rows, d, 1e-6f);
    same(dx1, dx2, "rmsnorm dx without dw");
  }
  {  // rope, swiglu, embedding
    const auto c = rnd(hd / 2), sn = rnd(hd / 2);
    auto x1 = rnd(heads * hd), x2 = x1;
    a.rope(x1.data(), heads, hd, c.data(), sn.data());
    b.rope(x2.data(), heads, hd, c.data(), sn.data());
    same(x1, x2, "rope");
    const auto g = rnd(dim), u = rnd(dim), dh = rnd(dim);
    std::vector<float> dg1(dim), du1(dim), dg2(dim), du2(dim);
    a.swiglu(dg1.data(), du1.data(), dh.data(), g.data(), u.data(), dim);
    b.swiglu(dg2.data(), du2.data(), dh.data(), g.data(), u.data(), dim);
    same(dg1, dg2, "swiglu dgate");
    same(du1, du2, "swiglu dup");
    const std::vector<int32_t> toks = {3, 1, 3, 0};
    const auto dout = rnd(4 * dim);
    auto t1 = rnd(5 * dim), t2 = t1;
    a.embedding(t1.data(), dout.data(), toks.data(), 4, dim);
    b.embedding(t2.data(), dout.data(), toks.data(), 4, dim);
    same(t1, t2, "embedding");
  }
  {  // attention
    const auto q = rnd(heads * hd), k = rnd(npos * stride), v = rnd(npos * stride), dout = rnd(heads * hd);
    std::vector<float> dq1(heads * hd), dq2(heads * hd), sc(npos);
    auto dk1 = rnd(npos * stride), dk2 = dk1, dv1 = rnd(npos * stride), dv2 = dv1;
    a.attention(dq1.data(), dk1.data(), dv1.data(), dout.data(), q.data(), k.data(), v.data(), npos, stride, heads, kvh,
                hd, 0.25f, sc.data());
    b.attention(dq2.data(), dk2.data(), dv2.data(), dout.data(), q.data(), k.data(), v.data(), npos, stride, heads, kvh,
                hd, 0.25f, sc.data());
    same(dq1, dq2, "attention dq");
    same(dk1, dk2, "attention dk");
    same(dv1, dv2, "attention dv");
  }
  {  // log-softmax, softmax, routing
    const auto logits = rnd(rows * V), dlp = rnd(rows);
    std::vector<int32_t> tg(rows);
    for (int64_t r = 0; r < rows; ++r) tg[r] = static_cast<int32_t>((r * 7) % V);
    std::vector<float> d1(rows * V), d2(rows * V);
    a.log_softmax_gather(d1.data(), logits.data(), tg.data(), dlp.data(), rows, V);
    b.log_softmax_gather(d2.data(), logits.data(), tg.data(), dlp.data(), rows, V);
    same(d1, d2, "log_softmax_gather");
    const auto y = rnd(rows * V), dy = rnd(rows * V);
    a.softmax(d1.data(), y.data(), dy.data(), rows, V);
    b.softmax(d2.data(), y.data(), dy.data(), rows, V);
    same(d1, d2, "softmax");
    const auto rl = rnd(rows * E), dw = rnd(rows * K);
    std::vector<int32_t> ex(rows * K);
    for (int64_t r = 0; r < rows; ++r)
      ex[r * K] = static_cast<int32_t>(r % E), ex[r * K + 1] = static_cast<int32_t>((r + 3) % E);
    for (bool renorm : {false, true}) {
      std::vector<float> m1(rows * E), m2(rows * E);
      a.moe_route(m1.data(), rl.data(), ex.data(), dw.data(), rows, E, K, renorm);
      b.moe_route(m2.data(), rl.data(), ex.data(), dw.data(), rows, E, K, renorm);
      same(m1, m2, "moe_route");
    }
  }
}

TEST(OpsBackwardBackends, VectorBuildsMatchScalarBuild) {
  if (!cpu_features().avx2 && !cpu_features().avx512) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  if (cpu_features().avx2) expect_backward_build_matches_scalar(detail::kOpsBackwardAvx2, "avx2");
  if (cpu_features().avx512) expect_backward_build_matches_scalar(detail::kOpsBackwardAvx512, "avx512");
}

}  // namespace
}  // namespace mxrl
