// A Qwen3 / Qwen3-MoE model prepared to compute under one precision plan,
// and its forward pass. The learner and the sampler both run this code: that
// sharing is what makes their log-probs agree bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/linear.h"
#include "model/params.h"
#include "model/plan.h"

namespace mxrl {

struct PreparedLayer {
  const float *input_norm, *q_norm, *k_norm, *post_norm;  // compute copies
  PreparedLinear q, k, v, o;
  PreparedLinear gate, up, down;  // dense MLP
  PreparedLinear router;          // MoE
  std::vector<PreparedLinear> expert_gate, expert_up, expert_down;
  bool moe = false;
};

// A compute copy (embedding or norm weight) by its checkpoint name.
struct NamedBuffer {
  std::string name;
  const float* data = nullptr;  // FP32 values (BF16-rounded when the plan uses BF16 copies)
  int64_t numel = 0;
  std::vector<int64_t> shape;
};

// What a model computes with, in shippable form: every linear's forward
// weights as held (MX codes + E8M0 scales, FP8 codes + scales, BF16 bits or
// FP32; unpacked), and every compute copy (embeddings, norms) as the FP32
// values used. Keys are checkpoint tensor names; a tied lm_head is the linear
// named model.embed_tokens.weight (the embedding's compute copy sits beside it).
struct WeightShipment {
  std::map<std::string, PreparedLinear> linears;
  std::map<std::string, std::vector<float>> copies;
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
  // Every prepared linear, in table order (for digests and sync).
  std::vector<const PreparedLinear*> linears() const;
  // Every compute copy (embeddings, norms), in parameter-table order.
  std::vector<NamedBuffer> compute_copies() const;
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
  std::vector<CopyInfo> copies_;         // compute_ by parameter, in table order
  std::vector<std::string> param_names_;
  std::vector<PreparedLayer> layers_;
  PreparedLinear lm_head_;
  RopeTable rope_;
};

// Keys and values per sequence slot and layer, after k_norm and RoPE:
// [layer][pos][kv_dim] each, growing as positions are written.
class KvCache {
 public:
  explicit KvCache(const ModelConfig& cfg);
  int add_sequence();                 // an empty slot (reusing released ones)
  void reset(int slot);               // length back to 0
  void release(int slot);             // frees the slot's memory; add_sequence may reuse it
  int64_t length(int slot) const { return len_[slot]; }
  int num_slots() const { return static_cast<int>(len_.size()); }
  // Make room for positions [0, n) of a slot.
  void reserve(int slot, int64_t n);
  void set_length(int slot, int64_t n) { len_[slot] = n; }
  float* k(int slot, int64_t layer, int64_t pos) { return &k_[slot][(layer * cap_[slot] + pos) * kv_dim_]; }
  float* v(int slot, int64_t layer, int64_t pos) { return &v_[slot][(layer * cap_[slot] + pos) * kv_dim_]; }
  const float* k(int slot, int64_t layer, int64_t pos) const { return &k_[slot][(layer * cap_[slot] + pos) * kv_dim_]; }
  const float* v(int slot, int64_t layer, int64_t pos) const { return &v_[slot][(layer * cap_[slot] + pos) * kv_dim_]; }
  int64_t kv_dim() const { return kv_dim_; }

 private:
  int64_t layers_, kv_dim_;
  std::vector<std::vector<float>> k_, v_;
  std::vector<int64_t> cap_, len_;
  std::vector<int> free_;
};

// A batch of tokens: token i belongs to cache slot slot[i] at position
// pos[i]. A slot's tokens in one call must be consecutive positions
// continuing its cache (the first at the slot's current length).
struct TokenBatch {
  std::vector<int32_t> tokens, slot;
  std::vector<int64_t> pos;
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  void add(int32_t token, int s, int64_t p) { tokens.push_back(token), slot.push_back(s), pos.push_back(p); }
};

// What a forward pass keeps for the backward (learner/backward.h): every
// layer's inputs and intermediates, FP32, one row per batch token. Keys and
// values (after k_norm and RoPE, as attention used them) stay in the KvCache.
struct ExpertTrace {
  std::vector<int64_t> rows;   // batch rows routed to this expert, ascending
  std::vector<float> weight;   // their routing weights [rows]
  std::vector<float> x, gate, up, h, y;  // x[rows, H], gate/up/h[rows, F], y[rows, H] (before weighting)
};
struct LayerTrace {
  std::vector<float> x_in, xn1;         // residual stream in, after input_layernorm [n, H]
  std::vector<float> q_raw, k_raw;      // q/k projections before q_norm/k_norm [n, q_dim], [n, kv_dim]
  std::vector<float> q;                 // after q_norm and RoPE [n, q_dim]
  std::vector<float> att;               // attention output, o_proj's input [n, q_dim]
  std::vector<float> x_mid, xn2;        // residual after attention, after post_attention_layernorm [n, H]
  std::vector<float> gate, up, h;       // dense MLP [n, F]
  std::vector<float> router_logits;     // MoE [n, E]
  std::vector<int32_t> experts;         // MoE [n, top_k]
  std::vector<float> weights;           // MoE [n, top_k]
  std::vector<ExpertTrace> expert;      // MoE, per expert
};
struct ForwardTrace {
  std::vector<LayerTrace> layers;
  std::vector<float> x_final, xn_final;  // before and after the final norm [n, H]
};

// Runs the model on the batch, appending each token's keys and values to
// the cache, and writes logits[n, vocab] — or, when `rows` is given, only the
// logits of those batch rows, logits[rows.size(), vocab]. Every row's logits
// are bitwise independent of the other rows of the call, of which rows are
// asked for, and of the thread count.
// With `trace`, also records what the backward needs (rows must then be null).
void forward(const Model& model, KvCache& cache, const TokenBatch& batch, float* logits, const Exec& exec = {},
             const std::vector<int64_t>* rows = nullptr, ForwardTrace* trace = nullptr);

}  // namespace mxrl
