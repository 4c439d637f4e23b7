// AdamW over the FP32 master weights of a ParamTable, with global-norm
// gradient clipping, linear warmup and a constant or cosine learning rate.
//
// Determinism: the gradient norm is summed in double over fixed blocks in a
// fixed order, and the update is element-wise FP32 with one fixed formula, so
// results are bitwise independent of the thread count.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "model/params.h"
#include "numerics/mx.h"
#include "util/settings.h"

namespace mxrl {

enum class LrSchedule { Constant, Cosine };

struct OptimConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  double clip_norm = 1.0;    // <= 0: no clipping
  int64_t warmup_steps = 0;  // linear warmup over the first warmup_steps steps
  LrSchedule schedule = LrSchedule::Constant;
  int64_t total_steps = 0;    // cosine: the step at which lr reaches its floor (> warmup_steps)
  double min_lr_ratio = 0.1;  // cosine floor, as a fraction of lr

  // Throws mxrl::Error "optimizer config: FIELD ..." for the first bad field.
  void validate() const;
  // Keys: the field names; schedule as "constant" / "cosine". from_json
  // takes defaults for missing keys, rejects unknown keys and wrong types
  // (naming the key), then validates. Doubles round-trip exactly.
  nlohmann::json to_json() const;
  static OptimConfig from_json(const nlohmann::json& j);
};
// Its fields (util/settings.h): key, flag, help, bounds. eps and total_steps
// have no option (total_steps is set by the run for the cosine schedule).
const SettingsTable<OptimConfig>& optim_fields();

// The learning rate of 0-based step `step`: lr * (step + 1) / warmup_steps
// while step < warmup_steps; then lr (Constant), or (Cosine)
//   floor + (lr - floor) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
// with floor = min_lr_ratio * lr, reaching floor at step == total_steps and
// staying there after.
double lr_at(const OptimConfig& c, int64_t step);

struct OptimStats {
  double grad_norm = 0;   // global L2 norm of the unclipped gradient
  double clip_scale = 1;  // the factor the gradient was multiplied by
  double lr = 0;          // the learning rate used
};

// Global L2 norm of the gradient: sums of squares in double over fixed blocks
// of 4096 elements, each summed in order, then the block sums added in order;
// the result does not depend on the thread count.
double global_grad_norm(const std::vector<float>& grads, const Exec& exec = {});

class AdamW {
 public:
  // Moments start at zero: m and v are FP32, one allocation each, with the
  // layout (offsets) of params.storage(). `layout` may be unallocated.
  AdamW(const ParamTable& layout, OptimConfig cfg);  // validates cfg

  // One update of every parameter, as PyTorch's AdamW (FP32 arithmetic):
  //   s = clip_norm > 0 && norm > clip_norm ? clip_norm / norm : 1  (norm of the unclipped grads)
  //   lr = lr_at(cfg, step()), t = step() + 1
  //   g = grad * s;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g
  //   p *= 1 - lr wd                      (only Linear and Embedding entries)
  //   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  // then step()++. Throws mxrl::Error, changing nothing, when the sizes do not
  // match the layout or the gradient norm is not finite.
  OptimStats step(ParamTable& params, const std::vector<float>& grads, const Exec& exec = {});

  int64_t step() const { return step_; }
  void set_step(int64_t s);  // s >= 0
  // The moments and step of a saved state (a resume); throws mxrl::Error
  // naming `where` when the moments do not fit this optimizer's layout.
  void restore(std::vector<float> m, std::vector<float> v, int64_t step, std::string_view where);
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  const OptimConfig& config() const { return cfg_; }

 private:
  struct Segment {  // a run of storage with one weight-decay flag
    int64_t begin, end;
    bool decay;
  };
  OptimConfig cfg_;
  int64_t numel_ = 0;
  std::vector<Segment> segments_;
  std::vector<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace mxrl
