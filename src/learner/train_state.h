// The full training state as one directory, written atomically:
//
//   config.json, model.safetensors       an HF checkpoint with F32 tensors, as
//   [tokenizer.json, tokenizer_config.json]   save_checkpoint writes it, so
//                                        load_checkpoint and transformers read
//                                        it as a model
//   optimizer.safetensors                "m.<param name>" and "v.<param name>",
//                                        F32, the param shapes
//   trainer_state.json                   {"format": "mxrl-train-state",
//                                         "version": 2, "step": N, "meta": {...},
//                                         "files": [further files],
//                                         "shapes": {param: [dims]},
//                                         "xxh3": {file: 16 hex digits}}
//
// "xxh3" holds the XXH3-64 (seed 0) of every other file of the directory, as
// written; a load checks each one before it reads anything else, so a
// flipped byte anywhere is refused naming the file. "shapes" records the
// model's parameters: a directory whose model does not match them is
// refused. Version 1 (without both) is refused.
//
// The directory is built next to its destination and swapped into place
// (write_dir_atomic): a failed save leaves an existing directory untouched.
// A load returns exactly what was saved (bitwise), except that
// config.torch_dtype reads back as "float32", the dtype the weights are stored in.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace mxrl {

struct TrainState {
  ModelConfig config;
  ParamTable params;                                  // FP32 master weights
  std::vector<float> m, v;                            // AdamW moments, the layout of params.storage()
  int64_t step = 0;                                   // optimizer steps taken
  nlohmann::json meta = nlohmann::json::object();     // run settings, data position, RNG state: opaque here
  std::string tokenizer_json, tokenizer_config_json;  // empty: not written
  // Further files of the state (name -> bytes; plain names, listed in
  // trainer_state.json as "files"): e.g. an RL run's rollout generated ahead.
  std::map<std::string, std::string> files = {};
};

inline constexpr const char* kTrainStateFormat = "mxrl-train-state";
inline constexpr int kTrainStateVersion = 2;

// Throws mxrl::Error naming `dir` (or the file) when the state is inconsistent
// (params of another config, moments of the wrong size, negative step, meta
// that cannot be serialized) or writing fails; `dir` is then unchanged.
void save_train_state(const std::string& dir, const TrainState& s);

// Validates everything and throws mxrl::Error naming the file and the
// problem: the checkpoint (as load_checkpoint; weights must be F32), a
// missing optimizer.safetensors or trainer_state.json, invalid JSON, wrong
// format or version, a bad step, missing/extra/mis-typed/mis-shaped moments,
// a file whose XXH3 is not the recorded one (or that the record misses), a
// model whose parameters are not the recorded shapes, and moments that hold
// a non-finite value (NaN or infinity: resuming from them trains on garbage).
TrainState load_train_state(const std::string& dir);

}  // namespace mxrl
