// The weight-sync bundle (docs/reference.md §6): weight version v as it moves from the
// learner to the sampler. A bundle is safetensors bytes (a file or a buffer)
// whose tensors are the payload and whose __metadata__ is the manifest:
//
//   "format"    "mxrl.sync.bundle/1"
//   "version"   the weight version, a decimal string ("0", "17"; no sign, no leading zeros)
//   "sync"      "ship" or "requantize"
//   "recipe"    the learner's plan name
//   "plan"      ship: the sampler plan the payload is for; requantize: the learner's plan
//   "config"    the model's config.json (ModelConfig::to_json) as a JSON string
//   "manifest"  digests_to_json of the manifest (model/digest.h) as a JSON string
//
// One manifest entry per payload part, in payload order; each part is one
// tensor of the file, its bytes as held in memory (little-endian). Keys:
//   part codes / bf16 / f32   the manifest name               (q_proj.weight)
//   part scales               the name + "_scale", so ".weight" becomes
//                             ".weight_scale" (vLLM's naming: F8_E8M0 for MX,
//                             F32 for the FP8 grids)       (q_proj.weight_scale)
//   the tied head             kTiedLmHeadName is stored as "lm_head.weight"
//                             (+ "lm_head.weight_scale"), the key an untied
//                             model's head has; a tied model has no other.
// So the embedding's compute copy keeps "model.embed_tokens.weight" and never
// shares a key with the tied head, whose manifest name tells the two cases apart.
//
// The two sync modes:
//   ship        what the sampler computes with, ready: for each linear the
//               learner's own prepared weights byte for byte when the sampler's
//               precision equals the learner's (MX codes + E8M0 scales, ...),
//               else the BF16 compute copy; embeddings and norms as the
//               learner's compute copies. The manifest is the sampler model's
//               model_digests (model/digest.h), names and order included.
//   requantize  the learner's high-precision compute copy of every parameter
//               (checkpoint names, table order): BF16 bits where the learner's
//               plan uses a BF16 copy (every linear not in fp32; embeddings and
//               norms when bf16_embeddings), else the FP32 master; part bf16 /
//               f32, precision "bf16" / "fp32". The sampler quantizes them under
//               its own plan, as an inference engine loading BF16 weights does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/digest.h"
#include "model/model.h"

namespace mxrl {

inline constexpr const char* kBundleFormat = "mxrl.sync.bundle/1";

enum class SyncMode { Ship, Requantize };
const char* sync_mode_name(SyncMode m);          // "ship", "requantize"
SyncMode parse_sync_mode(const std::string& s);  // throws listing both

struct Bundle {
  uint64_t version = 0;
  SyncMode mode = SyncMode::Ship;
  std::string recipe;                           // the learner's plan name (PrecisionPlan::name)
  std::string plan;                             // ship: the sampler plan name; requantize: the learner plan name
  nlohmann::json config;                        // ModelConfig::to_json() of the model
  std::vector<TensorDigest> manifest;           // one entry per payload part, in order
  std::vector<std::vector<std::byte>> payload;  // payload[i]: the bytes manifest[i] describes
};

// The safetensors key of a manifest entry (see above).
std::string bundle_key(const TensorDigest& d);

// Refuses, with one line naming the first tensor and both precisions, a ship
// from `learner` into `sampler` it cannot feed: each linear's sampler
// precision must equal the learner's or be BF16, and both plans must agree on
// bf16_embeddings. Anything else (mxfp8 from a bf16 learner, floor from
// rceil, fp32 from a non-fp32 learner) needs requantize.
void check_ship_compatible(const PrecisionPlan& learner, const PrecisionPlan& sampler, const ModelConfig& cfg);

// A ship bundle for a sampler under `sampler_plan` (see above). `learner` must
// have been prepared from `masters` (BF16 copies for other precisions are made
// from them). Throws as check_ship_compatible does.
Bundle make_ship_bundle(const Model& learner, const ParamTable& masters, const PrecisionPlan& sampler_plan,
                        uint64_t version, const Exec& exec = {});
// A requantize bundle of `masters` from a learner under `learner_plan`.
Bundle make_requantize_bundle(const ParamTable& masters, const PrecisionPlan& learner_plan, uint64_t version);

// The bundle of weight version `version` a learner under `learner_plan` with
// these masters sends a sampler under `sampler_plan` (ship: checked as
// check_ship_compatible does; requantize: the sampler plan is not used).
// What `mxrl sync export` and mxrl.sync.export write.
Bundle export_bundle(const ParamTable& masters, const PrecisionPlan& learner_plan, SyncMode mode,
                     const PrecisionPlan& sampler_plan, uint64_t version, const Exec& exec = {});
// Header and manifest as JSON: {format, version, sync, recipe, plan, config,
// manifest (digests_to_json)}; what `mxrl sync inspect --json` prints and
// mxrl.sync.inspect returns.
nlohmann::json bundle_summary(const Bundle& b);
// The manifest the learner expects the sampler to compute with under
// `sampler_plan`, from the learner's own objects and independently of any
// bundle: in model_digests order (parameter table, tied head last), each
// linear's linear_digests from the learner's prepared linear where the two
// precisions match, else from PreparedLinear::prepare of the master under the
// sampler's precision; each compute copy from the learner's when the plans
// agree on bf16_embeddings, else from the master. Equals
// model_digests(Model(masters, sampler_plan)). It is what a sampler loading a
// ship bundle, or a requantize bundle from a learner with BF16 copies under a
// plan with BF16 copies, computes with.
std::vector<TensorDigest> expected_manifest(const Model& learner, const ParamTable& masters,
                                            const PrecisionPlan& sampler_plan, const Exec& exec = {});

// The bundle as safetensors bytes: header keys sorted, tensors in manifest
// order, the data region 8-aligned (as SafetensorsWriter lays files out).
std::vector<std::byte> serialize(const Bundle& b);
// Validates everything and copies the payload out; throws one line
// "LABEL: problem": the safetensors layout, a missing or unknown metadata key,
// the format, the version string, malformed config or manifest JSON, an
// unknown part or a part whose dtype does not suit it, a manifest entry
// without its tensor or a tensor not in the manifest, a dtype, shape or byte
// count that disagrees, and an XXH3 that does not match the bytes (naming the
// tensor and part).
Bundle parse_bundle(std::span<const std::byte> bytes, const std::string& label);
// serialize() written atomically (util/atomic_file.h); read_bundle parses a file, labelled by its path.
void write_bundle(const Bundle& b, const std::string& path);
Bundle read_bundle(const std::string& path);

// Sampler side. The bundle must be for `cfg` (its config equal to
// cfg.to_json()) and in the right mode; every tensor of the model must be
// present once with the parts its precision holds, and nothing else. Throws
// naming the tensor.
// ship: the shipment Model::from_shipment takes (precisions parsed back from
// the manifest; the tied head as the linear named model.embed_tokens.weight).
WeightShipment bundle_to_shipment(const Bundle& b, const ModelConfig& cfg);
// requantize: the FP32 values of the BF16 / F32 copies, as a parameter table.
ParamTable bundle_to_params(const Bundle& b, const ModelConfig& cfg);

}  // namespace mxrl
