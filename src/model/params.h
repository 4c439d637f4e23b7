// The parameter table: every tensor of a Qwen3 / Qwen3-MoE model, its
// checkpoint name, shape and role, in one canonical order, backed by a single
// FP32 allocation (the master weights). One iterator, for_each, serves
// loading, saving, syncing, digests and the optimizer alike.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/config.h"

namespace mxrl {

enum class ParamRole : uint8_t { Embedding, Norm, Linear };
enum class LinearKind : uint8_t { Q, K, V, O, Gate, Up, Down, Router, LmHead };
const char* linear_kind_name(LinearKind k);  // "q", "k", ..., "router", "lm_head"

struct ParamInfo {
  std::string name;            // checkpoint name, e.g. model.layers.0.self_attn.q_proj.weight
  std::vector<int64_t> shape;  // [out, in] for linears
  ParamRole role;
  LinearKind linear = LinearKind::Q;  // when role == Linear
  int layer = -1;                     // -1: not in a decoder layer
  int expert = -1;                    // -1: not an expert
  int64_t offset = 0;                 // into the FP32 storage
  int64_t numel = 0;
};

// Indices into ParamTable::entries() for one decoder layer (-1 when absent).
struct LayerIndex {
  int input_norm = -1, q = -1, k = -1, v = -1, o = -1, q_norm = -1, k_norm = -1, post_norm = -1;
  int gate = -1, up = -1, down = -1;  // dense MLP
  int router = -1;                    // MoE
  std::vector<int> expert_gate, expert_up, expert_down;
};

class ParamTable {
 public:
  // allocate = false builds only the layout (names, shapes, indices): data()
  // must not be used then.
  explicit ParamTable(const ModelConfig& cfg, bool allocate = true);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& entries() const { return entries_; }
  const ParamInfo* find(std::string_view name) const;
  int index_of(std::string_view name) const;  // -1 if absent
  float* data(int i) { return storage_.data() + entries_[i].offset; }
  const float* data(int i) const { return storage_.data() + entries_[i].offset; }
  std::vector<float>& storage() { return storage_; }
  const std::vector<float>& storage() const { return storage_; }
  int64_t numel() const { return static_cast<int64_t>(storage_.size()); }

  int embed() const { return embed_; }
  int final_norm() const { return final_norm_; }
  // The weight that computes the logits: lm_head, or the embedding when tied.
  int lm_head() const { return lm_head_; }
  const LayerIndex& layer(int64_t i) const { return layers_[i]; }

  template <typename F>
  void for_each(F&& f) {
    for (size_t i = 0; i < entries_.size(); ++i) f(entries_[i], data(static_cast<int>(i)));
  }
  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < entries_.size(); ++i) f(entries_[i], data(static_cast<int>(i)));
  }

 private:
  int add(std::string name, std::vector<int64_t> shape, ParamRole role, LinearKind kind, int layer, int expert);
  ModelConfig cfg_;
  std::vector<ParamInfo> entries_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<LayerIndex> layers_;
  std::vector<float> storage_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;
};

}  // namespace mxrl
