#include "model/params.h"

#include <fmt/format.h>

namespace mxrl {

const char* linear_kind_name(LinearKind k) {
  static const char* names[] = {"q", "k", "v", "o", "gate", "up", "down", "router", "lm_head"};
  return names[static_cast<int>(k)];
}

int ParamTable::add(std::string name, std::vector<int64_t> shape, ParamRole role, LinearKind kind, int layer,
                    int expert) {
  ParamInfo p{std::move(name), std::move(shape), role, kind, layer, expert, 0, 1};
  for (int64_t d : p.shape) p.numel *= d;
  p.offset = entries_.empty() ? 0 : entries_.back().offset + entries_.back().numel;
  by_name_[p.name] = static_cast<int>(entries_.size());
  entries_.push_back(std::move(p));
  return static_cast<int>(entries_.size()) - 1;
}

ParamTable::ParamTable(const ModelConfig& c, bool allocate) : cfg_(c) {
  const int64_t H = c.hidden_size;
  embed_ = add("model.embed_tokens.weight", {c.vocab_size, H}, ParamRole::Embedding, LinearKind::Q, -1, -1);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    LayerIndex li;
    const std::string p = fmt::format("model.layers.{}.", l);
    auto lin = [&](const std::string& n, int64_t out, int64_t in, LinearKind k, int e = -1) {
      return add(p + n, {out, in}, ParamRole::Linear, k, l, e);
    };
    li.input_norm = add(p + "input_layernorm.weight", {H}, ParamRole::Norm, LinearKind::Q, l, -1);
    li.q = lin("self_attn.q_proj.weight", c.q_dim(), H, LinearKind::Q);
    li.k = lin("self_attn.k_proj.weight", c.kv_dim(), H, LinearKind::K);
    li.v = lin("self_attn.v_proj.weight", c.kv_dim(), H, LinearKind::V);
    li.o = lin("self_attn.o_proj.weight", H, c.q_dim(), LinearKind::O);
    li.q_norm = add(p + "self_attn.q_norm.weight", {c.head_dim}, ParamRole::Norm, LinearKind::Q, l, -1);
    li.k_norm = add(p + "self_attn.k_norm.weight", {c.head_dim}, ParamRole::Norm, LinearKind::Q, l, -1);
    li.post_norm = add(p + "post_attention_layernorm.weight", {H}, ParamRole::Norm, LinearKind::Q, l, -1);
    if (c.is_moe_layer(l)) {
      li.router = lin("mlp.gate.weight", c.num_experts, H, LinearKind::Router);
      const int64_t F = c.moe_intermediate_size;
      for (int e = 0; e < c.num_experts; ++e) {
        const std::string ep = fmt::format("mlp.experts.{}.", e);
        li.expert_gate.push_back(lin(ep + "gate_proj.weight", F, H, LinearKind::Gate, e));
        li.expert_up.push_back(lin(ep + "up_proj.weight", F, H, LinearKind::Up, e));
        li.expert_down.push_back(lin(ep + "down_proj.weight", H, F, LinearKind::Down, e));
      }
    } else {
      const int64_t F = c.intermediate_size;
      li.gate = lin("mlp.gate_proj.weight", F, H, LinearKind::Gate);
      li.up = lin("mlp.up_proj.weight", F, H, LinearKind::Up);
      li.down = lin("mlp.down_proj.weight", H, F, LinearKind::Down);
    }
    layers_.push_back(std::move(li));
  }
  final_norm_ = add("model.norm.weight", {H}, ParamRole::Norm, LinearKind::Q, -1, -1);
  lm_head_ = c.tie_word_embeddings
                 ? embed_
                 : add("lm_head.weight", {c.vocab_size, H}, ParamRole::Linear, LinearKind::LmHead, -1, -1);
  if (allocate) storage_.assign(entries_.back().offset + entries_.back().numel, 0.0f);
}

const ParamInfo* ParamTable::find(std::string_view name) const {
  const int i = index_of(name);
  return i < 0 ? nullptr : &entries_[i];
}

int ParamTable::index_of(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? -1 : it->second;
}

}  // namespace mxrl
