// Per-tensor digests and the manifest of what a prepared model computes with
// (docs/reference.md §6, checks 1-4). The learner and the sampler each produce this
// manifest from their Model and compare them:
//   coverage      every name present once, nothing missing or extra
//   placement     each name holds the bytes expected under it
//   grid identity MX codes and E8M0 scales equal byte for byte
//   exceptions    high-precision tensors in the expected dtype and values
//
// Entries, in parameter-table order, one per part of each tensor:
//   linear, MXFP8     codes  F8_E4M3 | F8_E5M2 | U8 (FP6/FP4, one code a byte)  [n, k]
//                     scales F8_E8M0                                        [n, k/32]
//   linear, FP8       codes  (as above)                                     [n, k]
//                     scales F32 (one per group)          [ceil(n/gr), ceil(k/gc)]
//   linear, BF16      bf16   BF16                                           [n, k]
//   linear, FP32      f32    F32                                            [n, k]
//   embedding / norm  bf16 BF16 when the plan uses BF16 compute copies (the
//                     BF16 bits of the copy), else f32 F32; the checkpoint shape
// Bytes are hashed as held in memory (little-endian). `precision` is
// LinearPrecision::str() for linears, "bf16" / "fp32" for compute copies.
//
// Tied embeddings: when tie_word_embeddings is set, the logits weight is the
// embedding prepared under the plan's lm_head precision, a tensor of its own
// that a sampler must refresh too. It appears once, after model.norm.weight
// (where lm_head.weight sits in an untied table), named kTiedLmHeadName, so
// that it never collides with the embedding's compute copy and a tied model's
// manifest never matches an untied one's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace mxrl {

inline constexpr const char* kTiedLmHeadName = "lm_head.weight (tied to model.embed_tokens.weight)";

struct TensorDigest {
  std::string name;            // checkpoint tensor name, e.g. model.layers.0.self_attn.q_proj.weight
  std::string part;            // "codes", "scales", "bf16", "f32" (what the bytes are)
  std::string dtype;           // safetensors spelling: F8_E4M3, F8_E5M2, U8 (FP6/FP4 codes), F8_E8M0, BF16, F32
  std::vector<int64_t> shape;  // of these bytes
  std::string precision;       // LinearPrecision::str() for linears, "bf16"/"fp32" for compute copies
  uint64_t xxh3 = 0;           // XXH3-64 of the bytes
  int64_t bytes = 0;
  bool operator==(const TensorDigest&) const = default;
};

// The manifest of `model` (see above).
std::vector<TensorDigest> model_digests(const Model& model);

// The digest entries of one prepared linear under `name` (its parts).
std::vector<TensorDigest> linear_digests(const PreparedLinear& linear, const std::string& name);

// XXH3-64 of a byte range (seed 0).
uint64_t digest_bytes(const void* data, size_t bytes);

// A readable diff between two manifests, one line per finding, empty when
// they are identical:
//   missing NAME (...)                     a name expected and absent
//   extra NAME (...)                       a name present and not expected
//   duplicate NAME [part]                  written more than once (either side)
//   NAME: parts ... expected, got ...      different parts (a dtype/precision change)
//   NAME [part]: FIELD expected X, got Y   the first differing field of dtype,
//                                          shape, precision, bytes, xxh3; for xxh3 it
//                                          names the expected tensor whose bytes it holds,
//                                          if any (a placement swap)
std::vector<std::string> compare_digests(const std::vector<TensorDigest>& expected,
                                         const std::vector<TensorDigest>& got);

// JSON: an array of {name, part, dtype, shape, precision, xxh3 (16 hex digits), bytes}.
nlohmann::json digests_to_json(const std::vector<TensorDigest>& d);
std::vector<TensorDigest> digests_from_json(const nlohmann::json& j);  // throws mxrl::Error when malformed

}  // namespace mxrl
