// libFuzzer target for the safetensors reader. Any input must either parse
// into views that tile the data region, or fail with mxrl::Error; any other
// exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.h"
#include "util/error.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto f = mxrl::SafetensorsFile::parse(bytes, "fuzz");
    // What parse() promises: the tensors, in offset order, exactly cover
    // the end of the input, each with numel * dtype_size bytes.
    const std::byte* cursor = nullptr;
    for (const auto& t : f.tensors()) {
      check(t.data.data() >= bytes.data() + 8 && t.data.data() + t.data.size() <= bytes.data() + size);
      check(!cursor || t.data.data() == cursor);
      cursor = t.data.data() + t.data.size();
      check(uint64_t(t.numel()) * mxrl::dtype_size(t.dtype) == t.data.size());
      check(f.find(t.name) == &t);
    }
    check(!cursor || cursor == bytes.data() + size);
  } catch (const mxrl::Error&) {
  }
  return 0;
}
