// MXRL_BEGIN_AVX2 / MXRL_END_AVX2: compile the code between them for AVX2 +
// FMA, leaving the rest of the file at the baseline target (as
// target_avx512.h does for AVX-512, and for the same reason: the C++ library
// and non-SIMD headers are included before the region opens).
#pragma once

#if defined(__clang__)
// clang-format off
#define MXRL_BEGIN_AVX2 _Pragma("clang attribute push(__attribute__((target(\"avx2,fma\"))), apply_to = function)")
// clang-format on
#define MXRL_END_AVX2 _Pragma("clang attribute pop")
#elif defined(__GNUC__)
#define MXRL_BEGIN_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define MXRL_END_AVX2 _Pragma("GCC pop_options")
#else
#error "AVX2 kernels need GCC or clang"
#endif

// The same with F16C (VCVTPH2PS: FP16 inputs of the quantizers); every CPU
// with AVX2 has it, and the AVX2 backend asks for both.
#if defined(__clang__)
// clang-format off
#define MXRL_BEGIN_AVX2_F16C _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
// clang-format on
#else
#define MXRL_BEGIN_AVX2_F16C _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#endif
