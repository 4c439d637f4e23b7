// libFuzzer target for engine weight dumps (src/interop/engine_dump.cc): the
// input is a dump file of the small model fuzz/dump_model.json (one MoE and
// one dense layer), read in both namings and verified against zero masters
// under mxfp8. Every input must be read (or fail with mxrl::Error, one line
// naming the file); anything else -- another exception, a crash, a sanitizer
// report -- is a bug. The seeds are clean dumps (fuzz/make_dump_seeds.py).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "interop/engine_dump.h"
#include "model/config.h"
#include "model/params.h"
#include "model/plan.h"
#include "util/error.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

struct Fixture {
  mxrl::ModelConfig cfg = mxrl::ModelConfig::load(MXRL_DUMP_MODEL);
  mxrl::ParamTable masters{cfg};
  mxrl::PrecisionPlan plan = mxrl::PrecisionPlan::named("mxfp8");
  std::string path = "/tmp/mxrl_dump_fuzz_" + std::to_string(getpid()) + ".safetensors";
  ~Fixture() { std::remove(path.c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture f;
  FILE* out = std::fopen(f.path.c_str(), "wb");
  check(out != nullptr);
  check(std::fwrite(data, 1, size, out) == size);
  check(std::fclose(out) == 0);
  for (const mxrl::Naming n : {mxrl::Naming::Vllm, mxrl::Naming::Mxrl}) {
    try {
      mxrl::read_dump_manifest(f.path, f.cfg, f.plan, n);
      mxrl::verify_dump(f.masters, f.plan, f.path, n);
    } catch (const mxrl::Error& e) {
      const std::string m = e.what();
      check(m.find('\n') == std::string::npos && !m.empty());
    }
  }
  return 0;
}
