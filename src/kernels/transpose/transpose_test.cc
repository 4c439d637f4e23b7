// Every transpose backend gives the reference's bytes, on ragged shapes,
// with the zero padding, on any number of threads.
#include "kernels/transpose/transpose.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "util/cpu.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

TEST(Transpose, EveryBackendMatchesTheDefinitionBitwise) {
  std::vector<Backend> backends{Backend::Scalar};
  if (cpu_features().avx2) backends.push_back(Backend::Avx2);
  if (cpu_features().avx512) backends.push_back(Backend::Avx512);
  ThreadPool pool(3);
  std::mt19937 rng(3);
  struct Shape {
    int64_t rows, cols, pad;
  };
  for (const Shape s : {Shape{1, 1, 1}, Shape{16, 16, 16}, Shape{17, 33, 32}, Shape{40, 16, 64}, Shape{64, 48, 64},
                        Shape{100, 7, 128}, Shape{5, 200, 32}, Shape{129, 257, 160}}) {
    std::vector<float> in(s.rows * s.cols);
    for (float& v : in) {
      const uint32_t u = rng();  // any bit pattern, NaNs included: the bytes must move unchanged
      std::memcpy(&v, &u, 4);
    }
    std::vector<uint32_t> want(s.cols * s.pad, 0);
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) std::memcpy(&want[c * s.pad + r], &in[r * s.cols + c], 4);
    for (Backend b : backends)
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        SCOPED_TRACE(testing::Message() << s.rows << "x" << s.cols << " pad " << s.pad << " " << backend_name(b)
                                        << (p ? " threads" : " serial"));
        std::vector<float> out(s.cols * s.pad, 1.0f);  // padding must be overwritten with zeros
        transpose(in.data(), s.rows, s.cols, s.pad, out.data(), Exec{p, b});
        EXPECT_EQ(std::memcmp(out.data(), want.data(), want.size() * 4), 0);
      }
  }
}

}  // namespace
}  // namespace mxrl
