// Random initialization and the embedded preset models.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/params.h"

namespace mxrl {

// Linear weights and embeddings ~ N(0, std^2) (output projections o_proj and
// down_proj scaled by 1/sqrt(2 * layers)), norm weights 1. Deterministic in seed.
void init_params(ParamTable& params, uint64_t seed, float std = 0.02f);

// The embedded model shapes, one table (init.cc):
//   "tiny-dense" / "tiny-moe", the presets: hidden 256, 4 layers, 8 query /
//       2 KV heads of 32, dense MLP 768 or 8 experts (top-2) of 256, for a
//       vocabulary of `vocab_size` (the built-in character tokenizer's);
//   "qwen3-0.6b": Qwen3-0.6B's shape and own vocabulary (151936; `vocab_size`
//       is ignored), for benchmarks with random weights.
ModelConfig shape_config(const std::string& name, int64_t vocab_size);
std::vector<std::string> shape_names();   // all of them
std::vector<std::string> preset_names();  // the presets (what `mxrl init --preset` and training take)
// shape_config for a preset; any other name is an error.
ModelConfig preset_config(const std::string& name, int64_t vocab_size);

}  // namespace mxrl
