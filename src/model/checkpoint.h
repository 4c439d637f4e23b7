// Hugging Face checkpoint directories: config.json plus model.safetensors, or
// shards listed in model.safetensors.index.json; BF16, F16 or F32 tensors
// with the names of docs/reference.md §8. Loading validates the weights against the
// config (every expected tensor present with its shape, nothing unexpected)
// and fails naming the tensor. Saving writes the same layout, into a fresh
// directory that is swapped into place (write_dir_atomic), so HF transformers
// can load it.
#pragma once
#include <map>
#include <string>

#include "io/safetensors.h"
#include "model/params.h"

namespace mxrl {

struct Checkpoint {
  ModelConfig config;
  ParamTable params;
  DType dtype = DType::F32;                     // the dtype the tensors were stored in
  std::map<std::string, std::string> shard_of;  // tensor -> shard file; empty: one file
  std::string tokenizer_json;                   // tokenizer.json contents, if the directory had one
  std::string tokenizer_config_json;
};

Checkpoint load_checkpoint(const std::string& dir);

// dtype: F32, BF16 or F16 (values rounded to nearest even). shard_of as in
// Checkpoint (empty: a single model.safetensors).
void save_checkpoint(const std::string& dir, const ModelConfig& config, const ParamTable& params, DType dtype,
                     const std::map<std::string, std::string>& shard_of = {}, const std::string& tokenizer_json = {},
                     const std::string& tokenizer_config_json = {});
void save_checkpoint(const std::string& dir, const Checkpoint& ck);

// The files of save_checkpoint, written into the existing directory `dir`
// (each file atomically, the directory as a whole not): for callers that
// build a larger directory inside write_dir_atomic (util/atomic_file.h), as
// save_checkpoint itself does.
void write_checkpoint_files(const std::string& dir, const ModelConfig& config, const ParamTable& params, DType dtype,
                            const std::map<std::string, std::string>& shard_of = {},
                            const std::string& tokenizer_json = {}, const std::string& tokenizer_config_json = {});

}  // namespace mxrl
