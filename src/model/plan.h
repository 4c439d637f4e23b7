// Precision plans: for every linear layer of a model (q, k, v, o, gate, up,
// down, each expert's, the router, lm_head) the precision it computes in.
// Activations entering a quantized linear are quantized the matching way,
// per token (1x32 MX blocks, per-token FP8 scale, or 1x128 FP8 groups).
//
// Named plans:
//   fp32          everything FP32 (weights are the FP32 masters)
//   bf16          every linear in BF16 (weights: the BF16 compute copy)
//   mxfp8         decoder linears MXFP8 E4M3 rceil; router and lm_head BF16
//   mxfp8-half    MXFP8 in even-numbered decoder layers, BF16 in the rest
//   mxfp8-floor   as mxfp8 with the floor scale rule
//   fp8-block128  decoder linears FP8 E4M3 128x128 weight tiles, 1x128 activations
//   fp8-tensor    decoder linears FP8 E4M3 per-tensor weights, per-token activations
// Any named plan takes the suffix "+fp8kv" for an FP8 KV cache (mxfp8+fp8kv).
// In every plan but fp32, embeddings and norm weights are their BF16 compute
// copies and activations stay FP32 between operations.
//
// TOML form (mxrl score --plan FILE.toml):
//   name = "custom"
//   default = "mxfp8"            # fp32 | bf16 | mxfp8 | fp8-tensor | fp8-block128
//   elem = "e4m3"                # MX / FP8 element type (default e4m3)
//   scale_rule = "rceil"         # MX scale rule (default rceil)
//   router = "bf16"              # default: bf16 (fp32 when default = "fp32")
//   lm_head = "bf16"             # default: bf16 (fp32 when default = "fp32")
//   embeddings = "bf16"          # bf16 or fp32: also norm weights
//   kv_cache = "fp8"             # fp8 (E4M3, per-head scales) or fp32 (default)
//   [[override]]                 # any number, applied in order
//   layers = [0, 2]              # optional (default: all decoder layers)
//   linears = ["q", "k", "gate"] # optional (default: all decoder linears)
//   experts = [0, 1]             # optional (default: all / not an expert)
//   precision = "bf16"           # and optionally elem, scale_rule
#pragma once
#include <string>
#include <vector>

#include "model/params.h"
#include "numerics/fp8_grid.h"
#include "numerics/mx.h"

namespace mxrl {

enum class Precision : uint8_t { FP32, BF16, MXFP8, FP8Tensor, FP8Block128 };
const char* precision_name(Precision p);

struct LinearPrecision {
  Precision precision = Precision::FP32;
  ElemType elem = ElemType::E4M3;
  ScaleRule rule = ScaleRule::RCeil;
  bool operator==(const LinearPrecision&) const = default;
  std::string str() const;  // "mxfp8(e4m3,rceil)", "bf16", ...
  // The inverse of str(); fields str() does not show keep their defaults
  // (E4M3, RCeil). Throws mxrl::Error quoting the string.
  static LinearPrecision parse(const std::string& s);
  // Every precision str() prints, each once (defaults where it prints nothing): what parse accepts.
  static std::vector<LinearPrecision> all();
};

struct PlanOverride {
  std::vector<int> layers;          // empty: all
  std::vector<LinearKind> linears;  // empty: all decoder linears
  std::vector<int> experts;         // empty: all
  LinearPrecision precision;
};

struct PrecisionPlan {
  std::string name;
  LinearPrecision decoder;  // default for q,k,v,o,gate,up,down (and experts)
  LinearPrecision router{Precision::BF16};
  LinearPrecision lm_head{Precision::BF16};
  bool bf16_embeddings = true;  // embeddings and norm weights as BF16 compute copies
  // KV cache on the FP8 E4M3 grid: each token's keys and values quantized per
  // KV head (scale = amax / 448) when written. Emulated: the cache holds the
  // dequantized FP32 values, so the numerics are an FP8 cache's, not the memory.
  bool fp8_kv_cache = false;
  std::vector<PlanOverride> overrides;

  // The precision of one linear (layer -1 / expert -1 where not applicable).
  LinearPrecision for_linear(LinearKind kind, int layer, int expert) const;
  LinearPrecision for_param(const ParamInfo& p) const { return for_linear(p.linear, p.layer, p.expert); }

  static PrecisionPlan named(const std::string& name);  // throws listing the names
  static PrecisionPlan load_toml(const std::string& path);
  // A name, or a path to a .toml file.
  static PrecisionPlan resolve(const std::string& name_or_path);
  static std::vector<std::string> names();
};

}  // namespace mxrl
