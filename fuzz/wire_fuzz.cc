// What crosses the wire between learner and sampler processes: the chunk
// stream into a staging buffer (sync/transport.h), and sample / request
// messages (sampler/sample_io.h). The first byte picks the reader; a chunk
// stream is [u32 length][chunk bytes] records for version 1. Malformed input
// must give mxrl::Error, never a crash, a hang or a read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "sampler/sample_io.h"
#include "sync/transport.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        mxrl::ByteReader r(in, "fuzz samples");
        (void)mxrl::read_samples(r);
        break;
      }
      case 1: {
        mxrl::ByteReader r(in, "fuzz requests");
        (void)mxrl::read_requests(r);
        break;
      }
      default: {
        mxrl::Staging st(1);
        size_t at = 0;
        while (at + 4 <= in.size()) {
          uint32_t n = 0;
          std::memcpy(&n, in.data() + at, 4);
          at += 4;
          n = static_cast<uint32_t>(std::min<size_t>(n, in.size() - at));
          st.accept(in.subspan(at, n));
          at += n;
        }
        if (st.complete()) (void)st.take();
      }
    }
  } catch (const mxrl::Error&) {
  }
  return 0;
}
