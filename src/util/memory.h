// How mxrl's processes (the CLI, and Python once `import mxrl` ran) ask glibc
// to treat large freed buffers.
#pragma once

namespace mxrl {

// Serve large allocations from the heap and keep freed memory for the next
// one, instead of mapping each buffer over 32 MiB afresh and handing it back
// when freed. mxrl allocates and frees large buffers every micro-batch and
// every generate call (the backward GEMMs' packed operands, a generate call's
// KV cache and activations); a fresh mapping costs a page fault and the
// kernel zeroing each 4 KiB page on first touch, microseconds apiece on a
// VM. Measured without it: 16k-token micro-batches trained 8-18% slower, and
// a 32 x 128-token prefill from Python ran 10% slower (docs/benchmarks.md).
// The process keeps its peak heap until exit. Process-wide; idempotent.
void keep_freed_memory();

}  // namespace mxrl
