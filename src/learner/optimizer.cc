#include "learner/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {

constexpr int64_t kNormBlock = 4096;       // elements per double partial sum
constexpr int64_t kUpdateGrain = 1 << 15;  // elements per parallel_for chunk, at least

const char* schedule_name(LrSchedule s) { return s == LrSchedule::Cosine ? "cosine" : "constant"; }

}  // namespace

const SettingsTable<OptimConfig>& optim_fields() {
  using O = OptimConfig;
  static const SettingsTable<O> t = [] {
    SettingsTable<O> t = {
        setting_field<O>("lr", "Peak learning rate", &O::lr).above(0),
        setting_field<O>("warmup_steps", "Linear warmup steps", &O::warmup_steps).min(0).cli("warmup"),
        setting_enum_field<O>("schedule", "Learning-rate schedule after the warmup", &O::schedule,
                              std::vector<LrSchedule>{LrSchedule::Constant, LrSchedule::Cosine}, schedule_name),
        setting_field<O>("min_lr_ratio", "Cosine floor as a fraction of --lr", &O::min_lr_ratio).range(0, 1),
        setting_field<O>("weight_decay", "AdamW decoupled weight decay (linears, embeddings)", &O::weight_decay).min(0),
        setting_field<O>("clip_norm", "Gradient clipping by global norm (0: off)", &O::clip_norm).cli("clip"),
        setting_field<O>("beta1", "AdamW beta1 (momentum)", &O::beta1).min(0).below(1),
        setting_field<O>("beta2", "AdamW beta2", &O::beta2).min(0).below(1),
        setting_field<O>("eps", "AdamW epsilon", &O::eps).above(0).no_cli(),
        setting_field<O>("total_steps", "Cosine: the step at which lr reaches its floor", &O::total_steps)
            .min(0)
            .no_cli(),
    };
    for (auto& f : t) f.optional_key();  // from_json: a missing key keeps the default
    return t;
  }();
  return t;
}

void OptimConfig::validate() const {
  const char* ctx = "optimizer config";
  setting_check_bounds(optim_fields(), *this, ctx);
  if (lr * weight_decay >= 1)
    fail("{}: weight_decay {} times lr {} must be below 1 (the decay factor is 1 - lr * weight_decay)", ctx,
         weight_decay, lr);
  if (schedule == LrSchedule::Cosine && total_steps <= warmup_steps)
    fail("{}: total_steps ({}) must exceed warmup_steps ({}) for the cosine schedule", ctx, total_steps, warmup_steps);
}

nlohmann::json OptimConfig::to_json() const { return settings_to_json(optim_fields(), *this); }

OptimConfig OptimConfig::from_json(const nlohmann::json& j) {
  OptimConfig c;  // missing keys keep these defaults (every field is optional)
  settings_from_json(optim_fields(), j, c, "optimizer config");
  c.validate();
  return c;
}

double lr_at(const OptimConfig& c, int64_t step) {
  if (step < 0) fail("lr_at: step must be >= 0, got {}", step);
  if (step < c.warmup_steps) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  if (c.schedule == LrSchedule::Constant) return c.lr;
  const double floor = c.min_lr_ratio * c.lr;
  if (step >= c.total_steps) return floor;
  const double progress =
      static_cast<double>(step - c.warmup_steps) / static_cast<double>(c.total_steps - c.warmup_steps);
  return floor + (c.lr - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

double global_grad_norm(const std::vector<float>& grads, const Exec& exec) {
  const int64_t n = static_cast<int64_t>(grads.size());
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(blocks, 0.0);
  const float* g = grads.data();
  parallel_for(
      exec.pool, blocks,
      [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t end = std::min(n, (b + 1) * kNormBlock);
          double s = 0;
          for (int64_t i = b * kNormBlock; i < end; ++i) s += static_cast<double>(g[i]) * g[i];
          partial[b] = s;
        }
      },
      8);
  double total = 0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

namespace {
std::vector<std::pair<int64_t, bool>> decay_runs(const ParamTable& t) {
  // (start offset, decay) of each maximal run of entries with one flag.
  std::vector<std::pair<int64_t, bool>> runs;
  for (const ParamInfo& p : t.entries()) {
    const bool decay = p.role == ParamRole::Linear || p.role == ParamRole::Embedding;
    if (runs.empty() || runs.back().second != decay) runs.emplace_back(p.offset, decay);
  }
  return runs;
}
}  // namespace

namespace {
struct UpdateConsts {
  float scale, b1, omb1, b2, omb2, step_size, bc2_sqrt, eps, decay;
};

// The element-wise update, one fixed sequence of FP32 operations per element
// (every one correctly rounded, so the SSE and scalar paths agree bit for bit):
//   gi = g * scale; m = b1 m + omb1 gi; v = b2 v + omb2 (gi gi);
//   p' = Decay ? p * decay : p; p = p' - step_size * (m / (sqrt(v) / bc2_sqrt + eps)).
template <bool Decay>
void update(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t n,
            const UpdateConsts& k) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 scale = _mm_set1_ps(k.scale), b1 = _mm_set1_ps(k.b1), omb1 = _mm_set1_ps(k.omb1);
  const __m128 b2 = _mm_set1_ps(k.b2), omb2 = _mm_set1_ps(k.omb2), step = _mm_set1_ps(k.step_size);
  const __m128 bc2 = _mm_set1_ps(k.bc2_sqrt), eps = _mm_set1_ps(k.eps), decay = _mm_set1_ps(k.decay);
  for (; i + 4 <= n; i += 4) {
    const __m128 gi = _mm_mul_ps(_mm_loadu_ps(g + i), scale);
    const __m128 mi = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m + i)), _mm_mul_ps(omb1, gi));
    const __m128 vi = _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(v + i)), _mm_mul_ps(omb2, _mm_mul_ps(gi, gi)));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    __m128 pi = _mm_loadu_ps(p + i);
    if (Decay) pi = _mm_mul_ps(pi, decay);
    const __m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), bc2), eps);
    _mm_storeu_ps(p + i, _mm_sub_ps(pi, _mm_mul_ps(step, _mm_div_ps(mi, denom))));
  }
#endif
  for (; i < n; ++i) {
    const float gi = g[i] * k.scale;
    const float mi = k.b1 * m[i] + k.omb1 * gi;
    const float vi = k.b2 * v[i] + k.omb2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    const float pi = Decay ? p[i] * k.decay : p[i];
    const float denom = std::sqrt(vi) / k.bc2_sqrt + k.eps;
    p[i] = pi - k.step_size * (mi / denom);
  }
}
}  // namespace

AdamW::AdamW(const ParamTable& layout, OptimConfig cfg) : cfg_(cfg) {
  cfg_.validate();
  const auto& e = layout.entries();
  numel_ = e.empty() ? 0 : e.back().offset + e.back().numel;
  const auto runs = decay_runs(layout);
  for (size_t i = 0; i < runs.size(); ++i)
    segments_.push_back({runs[i].first, i + 1 < runs.size() ? runs[i + 1].first : numel_, runs[i].second});
  m_.assign(numel_, 0.0f);
  v_.assign(numel_, 0.0f);
}

void AdamW::set_step(int64_t s) {
  if (s < 0) fail("AdamW: step must be >= 0, got {}", s);
  step_ = s;
}

void AdamW::restore(std::vector<float> m, std::vector<float> v, int64_t step, std::string_view where) {
  if (m.size() != m_.size() || v.size() != v_.size()) fail("{}: optimizer state does not fit the model", where);
  set_step(step);
  m_ = std::move(m);
  v_ = std::move(v);
}

OptimStats AdamW::step(ParamTable& params, const std::vector<float>& grads, const Exec& exec) {
  if (params.numel() != numel_)
    fail("AdamW step {}: the parameters have {} elements, the optimizer was built for {}", step_, params.numel(),
         numel_);
  if (static_cast<int64_t>(grads.size()) != numel_)
    fail("AdamW step {}: the gradient has {} elements, the parameters {}", step_, grads.size(), numel_);
  if (static_cast<int64_t>(m_.size()) != numel_ || static_cast<int64_t>(v_.size()) != numel_)
    fail("AdamW step {}: the moments have {} and {} elements, the parameters {}", step_, m_.size(), v_.size(), numel_);
  {
    const auto runs = decay_runs(params);
    bool same = runs.size() == segments_.size();
    for (size_t i = 0; same && i < runs.size(); ++i)
      same = runs[i].first == segments_[i].begin && runs[i].second == segments_[i].decay;
    if (!same) fail("AdamW step {}: the parameter table's layout differs from the optimizer's", step_);
  }

  OptimStats st;
  st.grad_norm = global_grad_norm(grads, exec);
  if (!std::isfinite(st.grad_norm))
    fail("AdamW step {}: the gradient norm is {}; no update was made", step_, st.grad_norm);
  st.clip_scale = cfg_.clip_norm > 0 && st.grad_norm > cfg_.clip_norm ? cfg_.clip_norm / st.grad_norm : 1.0;
  st.lr = lr_at(cfg_, step_);

  // The FP32 constants of this step (computed in double, rounded once).
  const double t = static_cast<double>(step_ + 1);
  const double bc1 = 1.0 - std::pow(cfg_.beta1, t), bc2 = 1.0 - std::pow(cfg_.beta2, t);
  const float scale = static_cast<float>(st.clip_scale);
  const float b1 = static_cast<float>(cfg_.beta1), omb1 = static_cast<float>(1.0 - cfg_.beta1);
  const float b2 = static_cast<float>(cfg_.beta2), omb2 = static_cast<float>(1.0 - cfg_.beta2);
  const float step_size = static_cast<float>(st.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(cfg_.eps);
  const float decay = static_cast<float>(1.0 - st.lr * cfg_.weight_decay);

  float* p = params.storage().data();
  float* m = m_.data();
  float* v = v_.data();
  const float* g = grads.data();
  const UpdateConsts k{scale, b1, omb1, b2, omb2, step_size, bc2_sqrt, eps, decay};
  auto kernel = [&](int64_t lo, int64_t hi, bool decayed) {
    if (decayed)
      update<true>(p + lo, m + lo, v + lo, g + lo, hi - lo, k);
    else
      update<false>(p + lo, m + lo, v + lo, g + lo, hi - lo, k);
  };
  parallel_for(
      exec.pool, numel_,
      [&](int64_t b, int64_t e) {
        // The first segment that ends after b.
        auto it = std::upper_bound(segments_.begin(), segments_.end(), b,
                                   [](int64_t x, const Segment& s) { return x < s.end; });
        for (; it != segments_.end() && it->begin < e; ++it)
          kernel(std::max(b, it->begin), std::min(e, it->end), it->decay);
      },
      kUpdateGrain);
  ++step_;
  return st;
}

}  // namespace mxrl
