// The seven live checks of a weight sync (docs/reference.md §6), one per condition. Each
// reads the live sampler — what its engine actually computes with after the
// swap, not the bundle it was sent — and returns findings, one line each,
// naming the tensor, cache entry or sample.
//
//   coverage    every tensor the sampler computes with is expected, once;
//               nothing expected is missing (names and parts of the manifests)
//   placement   each expected tensor's bytes sit under its own name with its
//               shape (a swap is named as such: "holds the bytes of X")
//   grid        MX / FP8 codes and scales equal the learner's byte for byte
//   exceptions  high-precision tensors (BF16/FP32 linears: router, lm_head;
//               embeddings and norms) in the expected dtype, precision and values
//   freshness   every derived object (execution plan, KV slots, prefix-cache
//               entries) carries the live version; every packed GEMM copy
//               re-packs, from the live weights, to the same bytes
//   atomicity   every sample and every token of the last rollout carries the
//               version it was meant to be generated under, and no sample
//               spans two; after a failed sync the live manifest equals the
//               previous version's
//   agreement   on a fixed probe batch, the sampler's per-token log-probs
//               against the learner's forward log-probs: bitwise when both run
//               the same plan on the same grid, else within the bound; the
//               measured exact KL and |Δlogp| are always reported
//
// Checks 1-4 split the findings of one manifest comparison by kind, so a
// fault is reported once, under the condition it breaks: a name missing or
// extra is coverage; a tensor holding another expected tensor's bytes, or a
// wrong shape, is placement; other byte differences are grid for MX/FP8
// parts and exceptions for high-precision ones, as is any change of dtype or
// precision of a tensor the learner keeps in high precision.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/digest.h"
#include "sampler/engine.h"

namespace mxrl {

enum class CheckMode { Stop, Warn, Off };  // "stop" | "warn" | "off"
const char* check_mode_name(CheckMode m);
CheckMode parse_check_mode(const std::string& s);

// The seven names, in condition order.
const std::vector<std::string>& check_names();

struct CheckResult {
  std::string name;
  bool ran = false, passed = true;
  std::vector<std::string> findings;
  double seconds = 0;
  nlohmann::json measured = nlohmann::json::object();  // agreement: kl/|Δlogp| figures
};

// What the learner knows about version v when the checks run.
struct Expectation {
  uint64_t version = 0;
  std::vector<TensorDigest> manifest;           // expected_manifest() for the sampler's plan
  std::vector<TensorDigest> previous_manifest;  // the live manifest before this sync (atomicity)
  bool sync_failed = false;                     // the apply threw: the old version must be serving whole
};

// Checks 1-4 from one comparison of the expected manifest with the live one.
// With the previous version's manifest, a tensor still holding its previous
// bytes (that should have changed) is a coverage finding: the sync did not
// write it. A part still holding its previous bytes beside parts this sync
// wrote (new codes, old scales) is a grid (or exceptions) finding.
// `transposed(name)`, when given, is asked about a linear whose bytes match
// nothing expected: true files it under placement as held transposed.
std::vector<CheckResult> check_manifests(const std::vector<TensorDigest>& expected,
                                         const std::vector<TensorDigest>& live,
                                         const std::vector<TensorDigest>& previous = {},
                                         const std::function<bool(const std::string& name)>& transposed = {});

// Whether `live` holds the transpose of `expected` (a square linear): its
// values are within 10% (relative L2) of expected^T and over 50% away from
// expected. Works across precisions, so a re-quantized transpose counts.
bool holds_transpose(const PreparedLinear& live, const PreparedLinear& expected);

// 5: derived objects and packed copies of the engine against its live version.
CheckResult check_freshness(const Engine& engine, const Exec& exec = {});

// 6: the last rollout (samples meant for `version`) and, after a failed sync,
// the live manifest against the previous one.
CheckResult check_atomicity(const Engine& engine, const Expectation& e, const std::vector<GeneratedSample>& samples,
                            uint64_t rollout_version, const std::vector<TensorDigest>& live);

// The probe batch: held-out prompts with completions; log-probs of the
// completion tokens are compared.
struct Probe {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int64_t> prompt_len;
  float temperature = 1.0f;
};

struct AgreementBound {
  bool bitwise = true;         // the plans match: every log-prob must be equal, bit for bit
  double max_kl = 0.05;        // otherwise: mean exact KL per token at most this
  double max_abs_dlogp = 2.0;  // and max |Δlogp| at most this
};

// 7: logits rows of the probe through the learner's model (the reference) and
// through the engine's own model and kernels.
CheckResult check_agreement(const Model& learner, const Engine& engine, const Probe& probe, const AgreementBound& bound,
                            const Exec& learner_exec = {});
// The same in two halves, for a learner in another process: the learner's
// logits rows of each probe sequence, and the check against them.
std::vector<std::vector<float>> probe_reference(const Model& learner, const Probe& probe,
                                                const Exec& learner_exec = {});
CheckResult check_agreement(const std::vector<std::vector<float>>& reference, const Engine& engine, const Probe& probe,
                            const AgreementBound& bound);

}  // namespace mxrl
