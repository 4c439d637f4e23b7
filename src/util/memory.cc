#include "util/memory.h"

#include <malloc.h>

#include <climits>

namespace mxrl {

void keep_freed_memory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
}

}  // namespace mxrl
