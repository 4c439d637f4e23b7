// MXRL_BEGIN_AVX512 / MXRL_END_AVX512: compile the code between them for
// AVX-512 (F, BW, DQ, VL) + FMA, leaving the rest of the file at the baseline
// target. Every *_avx512.cc file includes the C++ library and non-SIMD headers
// first and opens the region after them, so inline functions and templates
// from those headers are compiled for the baseline only: the linker can never
// pick an AVX-512 copy of, say, std::vector's members for code that runs on a
// CPU without AVX-512 (which a per-file -mavx512f would allow).
#pragma once

#if defined(__clang__)
// (_Pragma takes exactly one string literal: clang-format must not split it.)
// clang-format off
#define MXRL_BEGIN_AVX512 \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,fma\"))), apply_to = function)")
// clang-format on
#define MXRL_END_AVX512 _Pragma("clang attribute pop")
#elif defined(__GNUC__)
#define MXRL_BEGIN_AVX512 _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,fma\")")
#define MXRL_END_AVX512 _Pragma("GCC pop_options")
#else
#error "AVX-512 kernels need GCC or clang"
#endif

// The same with AVX512_BF16 (VDPBF16PS, VCVTNE2PS2BF16): code that runs only
// after cpu_features().avx512_bf16 and the GEMM's self-test said yes.
#if defined(__clang__)
// clang-format off
#define MXRL_BEGIN_AVX512_BF16 _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma\"))), apply_to = function)")
// clang-format on
#define MXRL_END_AVX512_BF16 _Pragma("clang attribute pop")
#else
#define MXRL_BEGIN_AVX512_BF16 \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma\")")
#define MXRL_END_AVX512_BF16 _Pragma("GCC pop_options")
#endif

// The same with AMX-TILE + AMX-BF16 (TDPBF16PS on tile registers): code that
// runs only after request_amx() (util/cpu.h) said yes and the caller asked
// for the AMX pair kernel (kernels/gemm/gemm.h).
#if defined(__clang__)
// clang-format off
#define MXRL_BEGIN_AMX _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,fma,amx-tile,amx-bf16\"))), apply_to = function)")
// clang-format on
#define MXRL_END_AMX _Pragma("clang attribute pop")
#else
#define MXRL_BEGIN_AMX \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,fma,amx-tile,amx-bf16\")")
#define MXRL_END_AMX _Pragma("GCC pop_options")
#endif

// Inside those regions, for the functions that use AVX512_VBMI (byte permutes:
// the GEMM's table-lookup decode, only called where cpu_features() has it):
// the region's features plus avx512vbmi. A lambda does not inherit it.
#define MXRL_TARGET_AVX512_VBMI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,fma")))
#define MXRL_TARGET_AVX512_BF16_VBMI \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,avx512vbmi,fma")))
