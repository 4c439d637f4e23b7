// A Qwen3 / Qwen3-MoE model prepared to compute under one precision plan: its
// layers' prepared linears and compute copies. The forward pass is in
// model/forward.h, the KV cache in model/kv_cache.h, the backward's trace in
// model/trace.h, the shipment format in model/shipment.h.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/ops/ops.h"
#include "model/linear.h"
#include "model/params.h"
#include "model/plan.h"
#include "model/shipment.h"

namespace mxrl {

struct PreparedLayer {
  const float *input_norm, *q_norm, *k_norm, *post_norm;  // compute copies
  PreparedLinear q, k, v, o;
  PreparedLinear gate, up, down;  // dense MLP
  PreparedLinear router;          // MoE
  std::vector<PreparedLinear> expert_gate, expert_up, expert_down;
  bool moe = false;
};

// One tensor a model computes with: a linear's forward weights as held, or a
// compute copy (embedding or norm). A tied lm_head is the linear named
// model.embed_tokens.weight; the embedding's compute copy has the same name.
struct ModelTensor {
  const std::string& name;
  const PreparedLinear* linear = nullptr;
  const NamedBuffer* copy = nullptr;
};

class Model {
 public:
  // Prepares every weight from the FP32 masters under `plan`.
  Model(const ParamTable& params, PrecisionPlan plan, const Exec& exec = {});
  // Takes shipped forward weights as they are (no re-quantization): each
  // tensor must be present exactly once, with the precision `plan` gives it
  // and the right sizes, and nothing else may be shipped; throws naming the
  // tensor otherwise.
  static Model from_shipment(const ModelConfig& cfg, PrecisionPlan plan, const WeightShipment& s,
                             const Exec& exec = {});
  // The inverse: this model's weights as a shipment.
  WeightShipment ship() const;

  const ModelConfig& config() const { return cfg_; }
  const PrecisionPlan& plan() const { return plan_; }
  const float* embedding() const { return compute_.data() + embed_off_; }
  const float* final_norm() const { return compute_.data() + final_norm_off_; }
  const PreparedLayer& layer(int64_t i) const { return layers_[i]; }
  const PreparedLinear& lm_head() const { return lm_head_; }
  const RopeTable& rope() const { return rope_; }
  // The one walk over what the model computes with (shipping, digests, sync):
  // every linear, layer by layer with lm_head last, then every compute copy
  // in parameter-table order.
  void for_each_tensor(const std::function<void(const ModelTensor&)>& f) const;
  // The linears, and the compute copies, of for_each_tensor in its order.
  std::vector<const PreparedLinear*> linears() const;
  std::vector<NamedBuffer> compute_copies() const;
  // The linear named `name` (a tied head: model.embed_tokens.weight); null if
  // none. The non-const one is for an edit in place after construction
  // (fault injection).
  const PreparedLinear* find_linear(const std::string& name) const;
  PreparedLinear* find_linear(const std::string& name);
  // The checkpoint name of every parameter-table entry, in table order.
  const std::vector<std::string>& param_names() const { return param_names_; }

 private:
  using LinearSource = std::function<PreparedLinear(int index, const ParamInfo& p, const LinearPrecision& prec)>;
  using CopySource = std::function<void(int index, const ParamInfo& p, float* dst)>;
  // The one builder: layout from `table` (storage not used), weights from the sources.
  Model(const ParamTable& table, PrecisionPlan plan, const LinearSource& linear, const CopySource& copy);

  ModelConfig cfg_;
  PrecisionPlan plan_;
  std::vector<float> compute_;  // compute copies of embeddings and norms (FP32 or BF16-rounded)
  int64_t embed_off_ = 0, final_norm_off_ = 0;
  struct CopyInfo {
    std::string name;
    int64_t offset, numel;
    std::vector<int64_t> shape;
  };
  std::vector<CopyInfo> copies_;  // compute_ by parameter, in table order
  std::vector<std::string> param_names_;
  std::vector<PreparedLayer> layers_;
  PreparedLinear lm_head_;
  RopeTable rope_;
};

}  // namespace mxrl
