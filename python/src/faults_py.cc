// mxrl.faults: the fault catalogue (faults/faults.h) as data, so that an
// adapter over another inference engine injects its faults under the same
// names and expects them under the same conditions as mxrl's own sampler.
#include <nanobind/nanobind.h>

#include "faults/faults.h"

namespace mxrl {

namespace nb = nanobind;

namespace {

nb::list catalogue() {
  nb::list out;
  for (const FaultInfo& f : fault_table()) {
    nb::dict d;
    d["name"] = f.name;
    d["condition"] = f.condition;
    d["check"] = condition_name(f.condition);
    d["seam"] = seam_name(f.seam);
    d["needs_moe"] = f.needs_moe;
    d["needs_tied_head"] = f.needs_tied_head;
    d["needs_requantize"] = f.needs_requantize;
    d["needs_fp8_kv"] = f.needs_fp8_kv;
    d["needs_mpi"] = f.needs_mpi;
    d["what"] = f.what;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_faults(nb::module_& m) {
  m.def("_faults_catalogue", &catalogue, "Every sync fault, in condition order (mxrl.faults.catalogue).");
}

}  // namespace mxrl
