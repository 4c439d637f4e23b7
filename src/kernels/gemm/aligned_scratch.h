// AlignedScratch<T>: a per-thread scratch buffer of the GEMM kernels, 64-byte
// aligned (whole cache lines, aligned AVX-512 loads) and growing only; its
// contents are not kept when it grows. aligned_alloc and free rather than
// std::vector, and included before a file's AVX-512 region opens
// (util/target_avx512.h), so its members are compiled for the baseline target
// only, whichever file instantiates them.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace mxrl::detail {

template <typename T>
class AlignedScratch {
 public:
  AlignedScratch() = default;
  // Allocates n elements at once.
  explicit AlignedScratch(size_t n) { get(n); }
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
  ~AlignedScratch() { std::free(data_); }

  // At least n elements (the size rounded up to whole 64-byte lines); throws
  // std::bad_alloc, leaving the buffer empty, when the allocation fails.
  T* get(size_t n) {
    if (n > size_) {
      std::free(data_);
      data_ = nullptr;
      size_ = 0;
      const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      data_ = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!data_) throw std::bad_alloc();
      size_ = bytes / sizeof(T);
    }
    return data_;
  }
  T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mxrl::detail
