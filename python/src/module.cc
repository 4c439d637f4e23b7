// The extension module mxrl._mxrl: mxrl's C++ core for Python (nanobind).
// python/mxrl/__init__.py re-exports it; errors the CLI reports as one line
// (mxrl::Error) raise ValueError with the same message.
#include <nanobind/nanobind.h>

#include "util/error.h"
#include "util/memory.h"
#include "util/version.h"

namespace nb = nanobind;

namespace mxrl {
void bind_numerics(nb::module_& m);
void bind_model(nb::module_& m);
void bind_sync(nb::module_& m);
void bind_faults(nb::module_& m);
void bind_rl(nb::module_& m);
void bind_stats(nb::module_& m);
void bind_ops(nb::module_& m);
}  // namespace mxrl

NB_MODULE(_mxrl, m) {
  m.doc() = "mxrl's C++ core: MX / FP8 numerics, models, the sampler, weight-sync checks and GRPO runs.";
  m.attr("__version__") = MXRL_VERSION;  // the CLI's too (CMakeLists.txt project VERSION)
  mxrl::keep_freed_memory();  // as the CLI does (util/memory.h); docs/python.md says so
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const mxrl::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  mxrl::bind_numerics(m);
  mxrl::bind_model(m);
  mxrl::bind_sync(m);
  mxrl::bind_faults(m);
  mxrl::bind_rl(m);
  mxrl::bind_stats(m);
  mxrl::bind_ops(m);  // the submodule mxrl._mxrl.ops
}
