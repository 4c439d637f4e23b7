// libFuzzer target for weight-sync bundles (src/sync/bundle.cc). Any input
// must parse or fail with mxrl::Error, one line starting "bundle: ". A bundle
// that parses serializes to bytes that parse back to the same bundle and
// serialize identically; decoding it for its own (small) model must succeed or
// fail with mxrl::Error. Any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "sync/bundle.h"
#include "util/error.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// Small enough to lay out and allocate in a fuzzing run.
bool small(const mxrl::ModelConfig& c) {
  const int64_t dims[] = {c.vocab_size, c.hidden_size,         c.intermediate_size,  c.moe_intermediate_size,
                          c.head_dim,   c.num_attention_heads, c.num_key_value_heads};
  for (int64_t d : dims)
    if (d > 4096) return false;
  return c.num_hidden_layers <= 8 && c.num_experts <= 16 && c.vocab_size * c.hidden_size <= (1 << 20) &&
         c.q_dim() <= 4096 && c.kv_dim() <= 4096;
}

void decode(const mxrl::Bundle& b) {
  const mxrl::ModelConfig cfg = mxrl::ModelConfig::from_json(b.config, "config");
  if (!small(cfg)) return;
  try {
    if (b.mode == mxrl::SyncMode::Ship)
      mxrl::bundle_to_shipment(b, cfg);
    else
      mxrl::bundle_to_params(b, cfg);
  } catch (const mxrl::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  mxrl::Bundle b;
  try {
    b = mxrl::parse_bundle(bytes, "bundle");
  } catch (const mxrl::Error& e) {
    const std::string m = e.what();
    check(m.rfind("bundle: ", 0) == 0 && m.find('\n') == std::string::npos);
    return 0;
  }
  const std::vector<std::byte> out = mxrl::serialize(b);
  const mxrl::Bundle again = mxrl::parse_bundle(out, "again");
  check(again.manifest == b.manifest && again.payload == b.payload && again.version == b.version);
  check(mxrl::serialize(again) == out);
  decode(b);
  return 0;
}
