// Deterministic decode GEMM (small M) in CUDA C++, issue 16's second decode kernel. det_sgemm.cu
// includes this file at its end (one library, one build); cuda_gemm.py's cache key covers both.
//
// The order is reference.py's: one program per (BN columns, chain j of 256 k, MB rows) computes the
// chain's partial part[j][m][n], a sequential FMA chain from +0.0 over k ascending; the fold adds the
// partials left to right onto -0.0, then the bias: det_fold_kernel below (det_decode_fold) or
// kernels.py's Triton fold kernel (the same adds, the same bits).
//
// What differs from det_sgemm.cu's det_gemv_kernel: the weights stream through a per-thread cp.async
// ring in shared memory (P stages of D rows; a thread waits only for its own copies, or its group's:
// no barrier in the k loop, and the bytes in flight cost no registers), which lets a thread hold a
// wider block (TN = 4 or 8 columns x MB rows: more FMAs per shared load of x and per upcast) at 3-6
// programs per SM. The chain's slice of x sits transposed in shared memory ([256][MB]), read back as
// 16-byte broadcasts. M > MB runs ceil(M / MB) row blocks as programs of their own (more programs
// where N is small; the row blocks of one chain read the same weights at once, the second from L2).
// Needs N % BN == 0, K % 32 == 0, chains of 256 k and K % D == 0 (the Python side checks).
#include <cuda_runtime.h>
#include <stdint.h>

namespace det_dec {

constexpr int CHAIN = 256;   // reference.py's CHAIN_K, compiled in (the x slice's size)

template <int TN> struct Words;                           // TN bf16 of one W^T row, one load
template <> struct Words<2> { using T = uint32_t; };
template <> struct Words<4> { using T = uint2; };
template <> struct Words<8> { using T = uint4; };

// bf16 -> FP32 is exact: the 16 bits become the high half of the word (one shift or mask each)
__device__ __forceinline__ void upcast(uint32_t u, float* f) {
  f[0] = __uint_as_float(u << 16);
  f[1] = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ void upcast(uint2 u, float* f) { upcast(u.x, f); upcast(u.y, f + 2); }
__device__ __forceinline__ void upcast(uint4 u, float* f) {
  upcast(u.x, f); upcast(u.y, f + 2); upcast(u.z, f + 4); upcast(u.w, f + 6);
}

// EF: the weights are read once, so they go into L2 marked evict-first and leave the chain
// partials (read back by the fold kernel) in L2.
constexpr int EVICT_FIRST = 1, WIDE_COPIES = 2;   // the FL flags of a configuration
template <int BYTES, int EF>
__device__ __forceinline__ void copy_async(void* dst, const void* src, uint64_t policy) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  if constexpr (EF && BYTES == 16)   // streamed once: past L1
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "l"(policy)
                 : "memory");
  else if constexpr (EF)
    asm volatile("cp.async.ca.shared.global.L2::cache_hint [%0], [%1], %2, %3;\n" ::"r"(s), "l"(src), "n"(BYTES),
                 "l"(policy) : "memory");
  else if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(src), "n"(BYTES) : "memory");
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wait_async() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory"); }

// The order in which a W^T row's MB x TN FMAs are written (flags >> 2; 0: rows in turn, columns
// inner). Each accumulator still sees k ascending, so the bits never depend on it; ptxas's register
// allocation and schedule do, and with them how many FFMAs read an operand from the reuse cache
// rather than the register banks (benchmarks/sass_banks.py; DETERMINISM_NOTES.md, call 13).
// t = 0 .. MB * TN - 1 -> (row, column). 1: rows in turn, the columns of every other row backwards
// (a row's last weight is the next row's first: reused); 5: rows in turn, the even rows first.
template <int MB, int TN, int ORD>
__device__ __forceinline__ constexpr int fma_m(int t) {
  if constexpr (ORD == 5) return t / TN < MB / 2 ? 2 * (t / TN) : 2 * (t / TN - MB / 2) + 1;
  else return t / TN;
}
template <int MB, int TN, int ORD>
__device__ __forceinline__ constexpr int fma_c(int t) {
  if constexpr (ORD == 1) return (t / TN) % 2 ? TN - 1 - t % TN : t % TN;
  else return t % TN;
}

// Programmatic dependent launch (compute capability 9.0 and up; no-ops below): the decode kernel lets
// the fold kernel be launched once all its programs have started, so that the fold's programs are
// resident, and its launch paid, while the decode kernel's last programs run.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_prerequisite_grid() {   // its completion and its memory
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

template <int MB, int TN, int NW, int D, int P>
struct DecodeShape {
  using W = typename Words<TN>::T;
  static constexpr int NT = NW * 32, BN = TN * NT;
  static constexpr size_t x_bytes = (size_t)CHAIN * MB * 4;
  static constexpr size_t ring_bytes = (size_t)P * D * NT * sizeof(W);
  static constexpr size_t smem_bytes = x_bytes + ring_bytes;
  static_assert(MB % 4 == 0, "x rows read as 16-byte words");
  static_assert(32 % D == 0, "a stage never straddles a chain: K % 32 == 0 suffices");
  static_assert(P >= 2, "a stage in flight while another is read");
};

template <int MB, int TN, int NW, int D, int P, int MINB, int FL>
__global__ void __launch_bounds__(NW * 32, MINB)
det_decode_kernel(const float* __restrict__ x, const uint16_t* __restrict__ wt, float* __restrict__ part,
                  int M, int N, int K) {
  allow_dependent_launch();
  const int M_all = M;                // the partials' rows (M becomes this program's below)
  using S = DecodeShape<MB, TN, NW, D, P>;
  using W = typename S::W;
  constexpr int NT = S::NT;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);                        // [CHAIN][MB]
  W* ring = reinterpret_cast<W*>(reinterpret_cast<char*>(smem4) + S::x_bytes);  // [P][D][NT]
  const int tid = threadIdx.x;
  // blockIdx.x = chain j x row blocks of MB rows (M > MB: the row blocks of one chain read the same
  // weights at the same time, the second from L2); the column tile is blockIdx.y, so one tile's
  // chains run together
  const int rb_count = (M + MB - 1) / MB, j = blockIdx.x / rb_count, m0 = (blockIdx.x % rb_count) * MB;
  x += (size_t)m0 * K;
  M = min(MB, M - m0);                // this program's rows
  const int k0 = j * CHAIN, len = min(CHAIN, K - k0);
  const int n = blockIdx.y * S::BN + tid * TN;
  float* const out = part + ((size_t)j * M_all + m0) * N + n;   // this thread's partials, row m0
  const W* src = reinterpret_cast<const W*>(wt + (size_t)k0 * N + n);
  const size_t row = (size_t)N * 2 / sizeof(W);                      // W words per W^T row
  const int stages = len / D;
  uint64_t policy = 0;
  constexpr int EF = FL & EVICT_FIRST, ORD = FL >> 2;
  static_assert(ORD == 0 || ORD == 1 || ORD == 5, "the FMA orders fma_m / fma_c define");
  if constexpr (EF) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));

  // ring: stage s of D rows -> slot s % P ([D][NT] words of W); one group per stage. Each thread
  // copies its own words (no other thread reads them), or, WIDE_COPIES, the G = 16 / sizeof(W)
  // threads of a group own 16 contiguous bytes of each row and thread i of the group copies rows
  // i, i + G, ... for all G: one 16-byte copy per G rows instead of one per row (the group's
  // threads then read each other's copies: a __syncwarp after the wait).
  constexpr int G = (FL & WIDE_COPIES) ? 16 / (int)sizeof(W) : 1;
  static_assert(D % G == 0, "a stage holds whole row groups");
  const int gi = tid % G;                                     // this thread's rows in its group
  W* const ring_t = ring + (tid - gi);                        // the group's first word of a row
  const W* const src_g = src - gi + gi * row;                 // the group's columns, row gi
  auto issue = [&](int s) {
    if (s < stages) {
      W* dst = ring_t + (size_t)(s % P) * D * NT + gi * NT;
      const W* g = src_g + (size_t)s * D * row;
#pragma unroll
      for (int r = 0; r < D / G; ++r) copy_async<sizeof(W) * G, EF>(dst + r * G * NT, g + r * G * row, policy);
    }
    commit_async();
  };
#pragma unroll
  for (int s = 0; s < P - 1; ++s) issue(s);

  {  // x[m][k0 + k] -> xs[k][m], zeros past M and past the chain; every load in flight at once.
     // A warp takes 4 float4 (64 bytes) of each of 8 rows: the transposed stores conflict 4-way.
    constexpr int Q = CHAIN / 4, PER = (Q * MB + NT - 1) / NT;
    float4 v[PER];
    int at[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = tid + i * NT, m = (e >> 2) % MB, kq = ((e >> 2) / MB) * 4 + (e & 3);
      at[i] = kq < Q ? kq * 4 * MB + m : -1;
      v[i] = (at[i] >= 0 && m < M && kq * 4 < len)
                 ? __ldg(reinterpret_cast<const float4*>(x + (size_t)m * K + k0) + kq)
                 : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      if (at[i] >= 0) {
        float* d = xs + at[i];
        d[0] = v[i].x; d[MB] = v[i].y; d[2 * MB] = v[i].z; d[3 * MB] = v[i].w;
      }
    }
  }
  __syncthreads();

  float acc[MB][TN];
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int c = 0; c < TN; ++c) acc[m][c] = 0.0f;

  auto fma_row = [&](W w, int k) {
    float f[TN];
    upcast(w, f);
    const float4* xr = reinterpret_cast<const float4*>(xs + k * MB);
    if constexpr (ORD == 0) {   // rows in turn, one 16-byte x load per 4 rows, columns inner
#pragma unroll
      for (int q = 0; q < MB / 4; ++q) {
        const float4 v = xr[q];
        const float xv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int c = 0; c < TN; ++c) acc[4 * q + i][c] = __fmaf_rn(xv[i], f[c], acc[4 * q + i][c]);
      }
    } else {                    // the row's x first, then the FMAs in fma_m / fma_c's order
      float xv[MB];
#pragma unroll
      for (int q = 0; q < MB / 4; ++q) {
        const float4 v = xr[q];
        xv[4 * q] = v.x; xv[4 * q + 1] = v.y; xv[4 * q + 2] = v.z; xv[4 * q + 3] = v.w;
      }
#pragma unroll
      for (int t = 0; t < MB * TN; ++t) {
        const int m = fma_m<MB, TN, ORD>(t), c = fma_c<MB, TN, ORD>(t);
        acc[m][c] = __fmaf_rn(xv[m], f[c], acc[m][c]);
      }
    }
  };

  for (int s = 0; s < stages; ++s) {
    wait_async<P - 2>();                // stage s has landed (this thread's own copies)
    if constexpr (G > 1) __syncwarp();  // ... and its group's; every thread is past slot (s - 1) % P
    issue(s + P - 1);                   // refills slot (s - 1) % P, whose rows fed finished FMAs
    const W* w = ring + (size_t)(s % P) * D * NT + tid;
#pragma unroll
    for (int r = 0; r < D; ++r) fma_row(w[r * NT], s * D + r);
  }

#pragma unroll
  for (int m = 0; m < MB; ++m) {
    if (m >= M) break;
    float* o = out + (size_t)m * N;
    if constexpr (TN % 4 == 0) {
#pragma unroll
      for (int c = 0; c < TN; c += 4)
        *reinterpret_cast<float4*>(o + c) = make_float4(acc[m][c], acc[m][c + 1], acc[m][c + 2], acc[m][c + 3]);
    } else if constexpr (TN == 2) {
      *reinterpret_cast<float2*>(o) = make_float2(acc[m][0], acc[m][1]);
    } else {
      o[0] = acc[m][0];
    }
  }
}

// The fold: y[m][n] = ((part[0][m][n] + part[1][m][n]) + ...) + bias[n], the S chain partials added
// left to right (the first one onto -0.0: itself), IEEE adds, four outputs (a float4) per thread,
// LOADS partials in flight per thread. WAIT: griddepcontrol.wait (launched as a programmatic
// dependent of the decode kernel: compute capability 9.0 and up), else launched after it.
constexpr int FOLD_THREADS = 128;
constexpr int FOLD_WAIT = 1, FOLD_DEEP = 2;   // det_decode_fold's mode bits (FOLD_DEEP: 16 loads, else 8)

__device__ __forceinline__ void add_to(float4& a, const float4& b) {
  a.x = __fadd_rn(a.x, b.x); a.y = __fadd_rn(a.y, b.y); a.z = __fadd_rn(a.z, b.z); a.w = __fadd_rn(a.w, b.w);
}

template <bool HAS_BIAS, bool WAIT, int LOADS>
__global__ void __launch_bounds__(FOLD_THREADS)
det_fold_kernel(const float* __restrict__ part, const float* __restrict__ bias, float* __restrict__ y, int MN, int N,
                int S) {
  if constexpr (WAIT) wait_for_prerequisite_grid();
  const int e = (blockIdx.x * FOLD_THREADS + threadIdx.x) * 4;
  if (e >= MN) return;
  const float4* p = reinterpret_cast<const float4*>(part + e);
  const size_t step = (size_t)MN / 4;
  float4 acc = __ldcg(p);    // L2: the decode kernel's stores, never this SM's L1
  for (int j0 = 1; j0 < S; j0 += LOADS) {
    float4 v[LOADS];
#pragma unroll
    for (int i = 0; i < LOADS; ++i)
      if (j0 + i < S) v[i] = __ldcg(p + (j0 + i) * step);
#pragma unroll
    for (int i = 0; i < LOADS; ++i)
      if (j0 + i < S) add_to(acc, v[i]);
  }
  if constexpr (HAS_BIAS) add_to(acc, *reinterpret_cast<const float4*>(bias + e % N));
  *reinterpret_cast<float4*>(y + e) = acc;
}

template <bool HAS_BIAS, bool WAIT>
int launch_fold_as(const float* part, const float* bias, float* y, int MN, int N, int S, bool deep,
                   cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((MN / 4 + FOLD_THREADS - 1) / FOLD_THREADS);
  cfg.blockDim = dim3(FOLD_THREADS);
  cfg.stream = stream;
  cudaLaunchAttribute pdl[1];
  pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = pdl;
  cfg.numAttrs = WAIT ? 1 : 0;
  return (int)(deep ? cudaLaunchKernelEx(&cfg, det_fold_kernel<HAS_BIAS, WAIT, 16>, part, bias, y, MN, N, S)
                    : cudaLaunchKernelEx(&cfg, det_fold_kernel<HAS_BIAS, WAIT, 8>, part, bias, y, MN, N, S));
}

// y [M, N] from the partials [S][M][N] (+ bias: FP32, or null); N % 4 == 0.
int launch_fold(const float* part, const float* bias, float* y, int M, int N, int S, int mode, cudaStream_t stream) {
  const int MN = M * N;
  const bool deep = mode & FOLD_DEEP;
  if (mode & FOLD_WAIT)
    return bias ? launch_fold_as<true, true>(part, bias, y, MN, N, S, deep, stream)
                : launch_fold_as<false, true>(part, bias, y, MN, N, S, deep, stream);
  return bias ? launch_fold_as<true, false>(part, bias, y, MN, N, S, deep, stream)
              : launch_fold_as<false, false>(part, bias, y, MN, N, S, deep, stream);
}

template <int MB, int TN, int NW, int D, int P, int MINB, int FL>
struct DecodeVariant {
  using S = DecodeShape<MB, TN, NW, D, P>;
  static constexpr auto kernel = det_decode_kernel<MB, TN, NW, D, P, MINB, FL>;

  static int prepare() {
    static int err = -1;
    if (err < 0) err = (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::smem_bytes);
    return err;
  }

  // the partials; then, fold_mode >= 0, y (+ bias) folded from them by det_fold_kernel in that mode
  static int launch(const float* x, const uint16_t* wt, float* part, int M, int N, int K, int chain,
                    cudaStream_t stream, int fold_mode = -1, const float* bias = nullptr, float* y = nullptr) {
    if (M <= 0 || N <= 0 || K <= 0 || N % S::BN || chain != CHAIN || K % 32 || K % D) return -1;
    const int err = prepare();
    if (err) return err;
    dim3 grid((K + CHAIN - 1) / CHAIN * ((M + MB - 1) / MB), N / S::BN);
    kernel<<<grid, S::NT, S::smem_bytes, stream>>>(x, wt, part, M, N, K);
    const int launched = (int)cudaGetLastError();
    if (launched || fold_mode < 0) return launched;
    return launch_fold(part, bias, y, M, N, (K + CHAIN - 1) / CHAIN, fold_mode, stream);
  }

  // fields: MB TN NW D P MINB FL threads block_n smem_bytes registers local_bytes blocks_per_sm
  static int info(int* out) {
    const KernelFacts f = kernel_facts(kernel, S::NT, S::smem_bytes, prepare());  // det_sgemm.cu's
    const int v[13] = {MB, TN, NW, D, P, MINB, FL, S::NT, S::BN, (int)S::smem_bytes,
                       f.registers, f.local_bytes, f.blocks_per_sm};
    for (int i = 0; i < 13; ++i) out[i] = v[i];
    return f.err;
  }
};

// The compiled configurations: MB TN NW D P MINB FL (rows, columns per thread, warps, rows per stage,
// ring stages, __launch_bounds__ programs per SM, flags: 1 weights evict-first in L2, 2 wide
// copies, >> 2 the FMA order of fma_m / fma_c); cuda_gemm.py reads this table, kernels.py's
// CUDA_DECODE_RULES adopt some of them.
#define DET_DECODE_VARIANTS(X) \
  X(16, 4, 4, 8, 3, 4, 3)      \
  X(16, 4, 4, 4, 4, 4, 3)      \
  X(16, 4, 4, 4, 6, 4, 3)      \
  X(16, 4, 4, 8, 4, 4, 3)      \
  X(16, 8, 4, 4, 3, 3, 1)      \
  X(16, 8, 4, 8, 2, 3, 1)      \
  X(16, 8, 2, 8, 2, 6, 1)      \
  X(8, 4, 4, 8, 3, 6, 3)       \
  X(8, 4, 2, 8, 3, 12, 3)      \
  X(8, 8, 4, 4, 3, 4, 1)       \
  X(8, 8, 4, 8, 2, 4, 1)       \
  X(8, 2, 4, 8, 4, 8, 3)       \
  X(16, 4, 4, 8, 3, 4, 7)      \
  X(16, 8, 4, 8, 2, 3, 21)     \
  X(8, 4, 4, 16, 2, 6, 7)

#define DET_DECODE_LAUNCH_CASE(MB, TN, NW, D, P, MINB, FL) \
  if (variant == i++)                                     \
    return DecodeVariant<MB, TN, NW, D, P, MINB, FL>::launch(x, wt, part, M, N, K, chain, stream, mode, bias, y);
#define DET_DECODE_INFO_CASE(MB, TN, NW, D, P, MINB, FL) \
  if (variant == i++) return DecodeVariant<MB, TN, NW, D, P, MINB, FL>::info(out);
#define DET_DECODE_COUNT(MB, TN, NW, D, P, MINB, FL) +1

// det_decode and det_decode_fold: the partials, then (mode >= 0) y folded from them
int launch_variant(int variant, const void* x_, const void* wt_, void* part_, const void* bias_, void* y_, int M,
                   int N, int K, int chain, int mode, void* stream_) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const float* x = static_cast<const float*>(x_);
  const uint16_t* wt = static_cast<const uint16_t*>(wt_);
  float* part = static_cast<float*>(part_);
  const float* bias = static_cast<const float*>(bias_);
  float* y = static_cast<float*>(y_);
  int i = 0;
  DET_DECODE_VARIANTS(DET_DECODE_LAUNCH_CASE)
  return -2;
}

}  // namespace det_dec

extern "C" {

int det_decode_variant_count() { return 0 DET_DECODE_VARIANTS(DET_DECODE_COUNT); }

int det_decode_info(int variant, int* out) {
  using namespace det_dec;
  int i = 0;
  DET_DECODE_VARIANTS(DET_DECODE_INFO_CASE)
  return -2;
}

int det_decode(int variant, const void* x_, const void* wt_, void* part_, int M, int N, int K, int chain,
               void* stream_) {
  return det_dec::launch_variant(variant, x_, wt_, part_, nullptr, nullptr, M, N, K, chain, -1, stream_);
}

// The partials, then y folded from them (+ bias, FP32 or null) by det_fold_kernel: mode FOLD_WAIT
// (a programmatic dependent launch: compute capability 9.0 and up) | FOLD_DEEP (16 loads in flight).
int det_decode_fold(int variant, const void* x_, const void* wt_, void* part_, const void* bias_, void* y_, int M,
                    int N, int K, int chain, int mode, void* stream_) {
  if (mode & ~(det_dec::FOLD_WAIT | det_dec::FOLD_DEEP)) return -1;
  return det_dec::launch_variant(variant, x_, wt_, part_, bias_, y_, M, N, K, chain, mode, stream_);
}

}  // extern "C"
