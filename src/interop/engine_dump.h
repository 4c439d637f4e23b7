// Checking other engines' weights (docs/reference.md §6, conditions 1-4): what a sampler
// computes with, written as an inference engine's weight dump (safetensors),
// read back as an mxrl manifest, and verified against what the learner says
// the sampler should hold.
//
// Two namings:
//   mxrl  the ship bundle's keys and dtypes (bundle.h bundle_key): X.weight
//         codes F8_E4M3 + X.weight_scale F8_E8M0 per MX linear, BF16 / F32
//         copies under their checkpoint names, a tied head as lm_head.weight.
//   vllm  vLLM's Qwen3 / Qwen3-MoE parameters (vllm/model_executor/models/
//         qwen2.py and qwen3.py stacked_params_mapping, qwen3_moe.py with
//         FusedMoE): q, k, v fused along the output dim, in that order, into
//         self_attn.qkv_proj.weight; gate, up into mlp.gate_up_proj.weight;
//         o_proj, down_proj as they are; routed experts stacked as
//         mlp.experts.w13_weight [E, 2I, H] (per expert gate rows then up
//         rows: FusedMoE's w1 then w3 shards) and mlp.experts.w2_weight
//         [E, H, I]; the router mlp.gate.weight; norms, embed_tokens, lm_head
//         under their HF names. Scales of a fused tensor are fused the same way
//         and named PARAM_scale (w13_weight_scale, qkv_proj.weight_scale); MX
//         scales are written U8, as compressed-tensors and vLLM hold them, and
//         read as U8 or F8_E8M0. A tied head is not written: vLLM's lm_head is
//         the embed_tokens tensor.
#pragma once
#include <string>
#include <vector>

#include "model/digest.h"
#include "model/model.h"
#include "sync/checks.h"

namespace mxrl {

enum class Naming { Mxrl, Vllm };
const char* naming_name(Naming n);          // "mxrl", "vllm"
Naming parse_naming(const std::string& s);  // throws mxrl::Error listing both

// What `model` computes with, written (atomically) as an engine's weight dump
// under `naming`. Throws naming the tensors when vLLM's fusion cannot hold
// them (q/k/v or gate/up of different precisions, FP8-grid scales, which
// vLLM keeps per shard).
void write_dump(const Model& model, Naming naming, const std::string& path);

// The live manifest a dump holds, under mxrl manifest names and parts
// (model/digest.h), vLLM's fused tensors split by the config's dims.
// Precisions are inferred from dtypes and shapes: codes + U8/F8_E8M0 scales
// are MX, with the element type of the codes' dtype (the plan's for U8 codes)
// and the scale rule the plan gives that tensor (bytes do not carry the
// rule; rceil where the plan has no MX there); codes + F32 scales are the
// FP8 grid the plan names there (else by the scales' shape); BF16 is "bf16",
// F32 "fp32". MX scales are listed as F8_E8M0 whatever their dtype in the
// file. A tied model's vLLM dump yields the tied-head entry from
// embed_tokens, prepared under the plan's lm_head precision as vLLM computes
// with it. Malformed files (bad safetensors, a fused tensor whose shape
// cannot be split) throw one line "PATH: problem"; unknown names are returned
// as they are (they become "extra" coverage findings).
std::vector<TensorDigest> read_dump_manifest(const std::string& path, const ModelConfig& cfg, const PrecisionPlan& plan,
                                             Naming naming);

// Conditions 1-4 (check_manifests of checks.h) of a dump against the
// manifest the learner's masters under `plan` say the sampler should hold
// (model_digests(Model(masters, plan)) = expected_manifest). A linear whose
// bytes match nothing expected is asked whether it holds the learner's weight
// transposed (placement). Without the previous version's manifest a tensor
// the sync never wrote cannot be told from one written wrong: it is reported
// as bytes that differ (grid / exceptions); verify_dump_since tells them apart.
std::vector<CheckResult> verify_dump(const ParamTable& masters, const PrecisionPlan& plan, const std::string& dump_path,
                                     Naming naming, const Exec& exec = {});
// The same, knowing what the sampler held before this sync (the previous
// version's model_digests): a tensor still holding those bytes is a coverage
// finding (not written by the sync), a part of them beside new parts a grid one.
std::vector<CheckResult> verify_dump_since(const ParamTable& masters, const PrecisionPlan& plan,
                                           const std::string& dump_path, Naming naming,
                                           const std::vector<TensorDigest>& previous, const Exec& exec = {});

}  // namespace mxrl
