// MXFP8 models in the compressed-tensors layout vLLM loads
// (https://github.com/neuralmagic/compressed-tensors, format
// "mxfp8-quantized"): Hugging Face (unfused) tensor names, each MXFP8 linear
// as X.weight F8_E4M3 [n, k] codes + X.weight_scale U8 [n, k/32] E8M0
// exponents (2^(e - 127)); embeddings, norms, the router and lm_head in BF16
// (the quantization_config's "ignore": lm_head and the MoE routers). mxrl
// writes exactly the bytes its model computes with, so vLLM and mxrl compute
// with the same weights.
#pragma once
#include <string>

#include "model/model.h"

namespace mxrl {

// config.json has quantization_config.quant_method == "compressed-tensors".
bool is_compressed_tensors(const std::string& dir);

// Writes `out_dir` (atomically, as save_checkpoint does) holding what `model`
// computes with in that layout: model.safetensors (__metadata__ "mxrl.plan":
// the plan and its scale rule, for information), config.json (the model's
// config plus quantization_config: config_groups.group_0 targets ["Linear"],
// MXFP8 weights and dynamic MXFP8 input activations, ignore ["lm_head",
// "re:.*mlp.gate$"], quantization_status "compressed"), and the tokenizer
// files given. A tied head is not written (HF ties lm_head to the embedding).
// Throws naming the tensor when the model's plan is not MXFP8 E4M3 for every
// decoder linear with BF16 router, lm_head and embeddings.
void export_compressed_tensors(const Model& model, const std::string& tokenizer_json,
                               const std::string& tokenizer_config_json, const std::string& out_dir);

// A model from a plain checkpoint directory (Model(load_checkpoint(dir).params,
// plan)) or a compressed-tensors one (Model::from_shipment: codes and scales as
// held, byte for byte; the plan must compute every tensor in the precision it
// is held in, else one line naming the tensor and both precisions; the MX
// scale rule is not in the bytes, so the plan's is taken).
Model load_model(const std::string& dir, const PrecisionPlan& plan, const Exec& exec = {});

// The FP32 values `model` computes with, as a parameter table (a trainable
// checkpoint's masters): each linear's weights dequantized exactly (MX codes
// times their power-of-two scales, BF16 bits widened), each compute copy as
// held. A tied head is the embedding's.
ParamTable computed_values(const Model& model);

// The config of either kind of directory (a compressed-tensors config.json
// without its quantization_config).
ModelConfig load_model_config(const std::string& dir);

// The tokenizer files of a directory (either kind), "" where absent.
struct TokenizerFiles {
  std::string tokenizer_json, tokenizer_config_json;
};
TokenizerFiles load_tokenizer_files(const std::string& dir);

}  // namespace mxrl
