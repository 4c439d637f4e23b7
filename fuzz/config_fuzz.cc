// libFuzzer target for config.json (src/model/config.cc). The input is parsed
// as JSON and read as a model config: it must load or fail with mxrl::Error
// (a one-line message naming the field). A config that loads validates, and
// what mxrl writes for it (to_json) reads back to the same config.
// Any other exception, crash or sanitizer report is a bug.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "model/config.h"
#include "util/error.h"
#include "util/json_read.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  mxrl::ModelConfig c;
  try {
    c = mxrl::ModelConfig::from_json(mxrl::json_parse(text, "config.json"), "config.json");
  } catch (const mxrl::Error& e) {
    const std::string m = e.what();
    if (m.rfind("config.json: ", 0) != 0 || m.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  c.validate("again");
  const mxrl::ModelConfig d = mxrl::ModelConfig::from_json(c.to_json(), "round trip");
  if (d.to_json() != c.to_json()) std::abort();
  return 0;
}
