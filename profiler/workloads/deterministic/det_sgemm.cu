// Deterministic FP32-FMA GEMM y = x . W^T (+ bias) for large M, in CUDA C++ (cuda_gemm.py builds it
// with nvcc at first use and calls it through ctypes; the Gluon tile kernel stays the fallback).
//
// The order is reference.py's, the same as kernels.py's tile kernel: for every output (m, n), K is
// cut into chains of `chain` consecutive k; each chain is a sequential FMA chain from +0.0 over k
// ascending; the chain partials are added left to right onto -0.0 (-0.0 + p0 == p0 for every p0);
// bias last. A thread owns its outputs for the whole of K, so the tiling below changes speed only.
//
// Layout: x [M, K] FP32 row-major; wt = W^T [K, N] bf16 row-major; y [M, N] FP32; bias [N] FP32
// or null. Needs K % BK == 0, chain % BK == 0, N % 4 == 0, 16-byte aligned x and y, 8-byte wt
// (the Python side checks and otherwise runs the Gluon kernel).
//
// A program owns a BM x BN tile; each of its threads a TM x TN register block, as TM/4 x TN/4
// groups of 4 x 4 spaced BM/(TM/4) and BN/(TN/4) apart, so that each group is one 16-byte shared
// load. Tiles of BK k go global -> registers (W upcast there) -> shared memory (x transposed),
// double-buffered: the loads of tile t + 1 are in flight while tile t is multiplied (issued before
// the previous barrier, so that the compiler cannot sink them below the FMAs), one barrier per
// tile. TOTAL_SMEM keeps the running sum of chain partials in shared memory (each thread its own
// words, no barrier) instead of registers, halving the accumulator registers. N_OUTER only
// reorders a k step's independent FMAs (another register allocation: fewer bank conflicts).
// FLAGS (speed only, the same FMAs in the same order): LATE_STORE writes tile t + 1 into its
// buffer at the top of tile t, after the barrier that ends tile t - 1, instead of before the
// barrier that ends tile t (two buffers suffice: that buffer's last readers, tile t - 1's, have
// passed the barrier), so that a warp reaches the barrier right after its FMAs.
// MBAR_RING: three buffers and no __syncthreads in the k loop: halfway through tile t each thread
// stores tile t + 1 into buffer (t + 1) % 3 and arrives on that buffer's mbarrier; tile t + 1 starts
// with a wait for all arrivals. A warp ahead of the others waits only when it is half a tile ahead
// (the barrier made every warp wait for the slowest at every tile). The buffer written in tile t was
// last read in tile t - 2, which every thread finished before it arrived in tile t - 1, and this
// thread waited for those arrivals at the start of tile t. EARLY_RING (with MBAR_RING) stores and
// arrives after the first k step instead, and waits for tile t + 1 before tile t's last k step's
// FMAs (after its shared loads), so that the wait's latency hides behind them. ORDER (FLAGS >> 4,
// `fma_slot`) picks another order of a k step's FMAs. VEC_TOTAL reads and writes the running total
// as float4s.
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int LATE_STORE = 2, MBAR_RING = 4, EARLY_RING = 8, ORDER_SHIFT = 4, VEC_TOTAL = 256;

// Which output (i * TN + j) of the register block gets a k step's s-th FMA. Every order gives each
// output one FMA per k step, so the bits are the same; ptxas allocates registers by it (bank
// conflicts, reuse-cache hits), which moved the time by up to 8 % in call 13 (DETERMINISM_NOTES.md).
// 0: rows outer (columns outer with N_OUTER); 1: columns outer, the rows of every other column
// backwards (a snake: the turn reuses a row's register); 7: rows outer, columns in a snake.
template <int TM, int TN, bool N_OUTER, int ORDER>
__host__ __device__ constexpr int fma_slot(int s) {
  if (ORDER == 1) {
    const int j = s / TM, r = s % TM;
    return (j % 2 ? TM - 1 - r : r) * TN + j;
  }
  if (ORDER == 7) {
    const int i = s / TN, r = s % TN;
    return i * TN + (i % 2 ? TN - 1 - r : r);
  }
  return N_OUTER ? (s % TM) * TN + s / TM : s;
}

// One k step of a TM x TN register block: every acc[i][j] += a[i] * b[j] (IEEE FMA), in fma_slot's
// order. Shared by det_sgemm_kernel and det_prefill_ws.cu's consumers.
template <int TM, int TN, bool N_OUTER, int ORDER>
__device__ __forceinline__ void fma_step(float (&acc)[TM][TN], const float (&a)[TM], const float (&b)[TN]) {
#pragma unroll
  for (int s = 0; s < TM * TN; ++s) {
    const int e = fma_slot<TM, TN, N_OUTER, ORDER>(s);
    acc[e / TN][e % TN] = __fmaf_rn(a[e / TN], b[e % TN], acc[e / TN][e % TN]);
  }
}

// A chain's partial onto this thread's running totals in shared memory, output (i, j) at
// tot[(i * TN + j) * stride + tid] (__fadd_rn: never contracted into an FMA).
template <int TM, int TN>
__device__ __forceinline__ void add_partial(float* tot, int stride, int tid, const float (&acc)[TM][TN]) {
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      float* p = tot + (i * TN + j) * stride + tid;
      *p = __fadd_rn(*p, acc[i][j]);
    }
}

// The register block's outputs (+ bias) into y: row i of the block is m0 + (i / 4) SGM + 4 ty + i % 4,
// group g of 4 columns n0 + g SGN + 4 tx; total(i, g) gives the group's 4 totals. Rows past M and
// columns past N are not stored.
template <int TM, int TN, int SGM, int SGN, typename Total>
__device__ __forceinline__ void store_block(float* __restrict__ y, const float* __restrict__ bias, int M, int N,
                                            int m0, int n0, int ty, int tx, Total total) {
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = m0 + (i / 4) * SGM + ty * 4 + i % 4;
    if (m >= M) continue;
#pragma unroll
    for (int g = 0; g < TN / 4; ++g) {
      const int n = n0 + g * SGN + tx * 4;
      if (n >= N) continue;
      const float4 t4 = total(i, g);
      float v[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        v[c] = (&t4.x)[c];
        if (bias != nullptr) v[c] = __fadd_rn(v[c], bias[n + c]);
      }
      *reinterpret_cast<float4*>(y + (size_t)m * N + n) = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

template <int BM, int BN, int BK, int TM, int TN, bool TOTAL_SMEM, int NBUF = 2>
struct Shape {
  static constexpr int TY = BM / TM, TX = BN / TN, NT = TY * TX;
  static constexpr int GM = TM / 4, GN = TN / 4;      // 4-wide groups per thread
  static constexpr int SGM = BM / GM, SGN = BN / GN;  // distance between a thread's groups
  static constexpr int WX = TX / 8;                   // warps along N (a warp: 4 x 8 threads)
  static constexpr int XV = BM * BK / 4 / NT;         // float4 of x per thread and tile
  static constexpr int WV = BN * BK / 4 / NT;         // 4 x bf16 of W per thread and tile
  static constexpr int BMP = BM + 4;                  // padded x^T row: fewer store conflicts
  static constexpr int XS = BK * BMP, WS = BK * BN;   // floats per buffer
  static constexpr size_t smem_bytes =
      (size_t)(NBUF * (XS + WS) + (TOTAL_SMEM ? BM * BN : 0)) * 4 + (NBUF > 2 ? NBUF * 8 : 0);  // + mbarriers
  static_assert(TM % 4 == 0 && TN % 4 == 0, "register blocks of 4 x 4 groups");
  static_assert(TX % 8 == 0 && TY % 4 == 0, "warps of 4 x 8 threads");
  static_assert(BK % 4 == 0 && XV >= 1 && WV >= 1, "every thread loads x and W");
  static_assert(XV * NT * 4 == BM * BK && WV * NT * 4 == BN * BK, "loads cover the tiles");
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// release: this thread's shared stores (and reads) before it are seen by whoever waits on the phase
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// (try_wait, which may suspend the thread, needs sm_90; Ampere and Ada poll with test_wait)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define DET_MBAR_WAIT "mbarrier.test_wait.parity.shared::cta.b64"
#else
#define DET_MBAR_WAIT "mbarrier.try_wait.parity.shared::cta.b64"
#endif
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "wait_%=:\n " DET_MBAR_WAIT " done, [%0], %1;\n @!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// N_OUTER: the register block's FMAs of one k walk the columns in the outer loop (another
// instruction order and register allocation for ptxas; every acc[i][j] still gets its FMAs in k order).
template <int BM, int BN, int BK, int TM, int TN, bool TOTAL_SMEM, int MINB, bool N_OUTER, int FLAGS>
__global__ void __launch_bounds__(Shape<BM, BN, BK, TM, TN, TOTAL_SMEM, (FLAGS & MBAR_RING) ? 3 : 2>::NT, MINB)
det_sgemm_kernel(const float* __restrict__ x, const uint32_t* __restrict__ wt, const float* __restrict__ bias,
                 float* __restrict__ y, int M, int N, int K, int tiles_per_chain) {
  constexpr bool RING = FLAGS & MBAR_RING;
  constexpr bool EARLY = RING && (FLAGS & EARLY_RING);
  constexpr int STORE_AFTER = EARLY ? 0 : BK / 2 - 1;    // RING: the k step after which tile t + 1 is stored
  constexpr int NBUF = RING ? 3 : 2;
  using S = Shape<BM, BN, BK, TM, TN, TOTAL_SMEM, NBUF>;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* xs = smem;                      // [NBUF][BK][BMP]  x^T
  float* ws = smem + NBUF * S::XS;       // [NBUF][BK][BN]   W^T upcast
  float* tot = ws + NBUF * S::WS;        // [TM * TN][NT] (TOTAL_SMEM)
  // MBAR_RING: one mbarrier per buffer, after the floats (8-byte aligned: every size above is 16 k bytes)
  uint64_t* bars = reinterpret_cast<uint64_t*>(tot + (TOTAL_SMEM ? BM * BN : 0));

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int ty = (warp / S::WX) * 4 + lane / 8;
  const int tx = (warp % S::WX) * 8 + lane % 8;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;

  // this thread's share of each tile's loads
  const float* xsrc[S::XV];
  bool xok[S::XV];
  int xdst[S::XV];
#pragma unroll
  for (int i = 0; i < S::XV; ++i) {
    const int f = tid + i * S::NT, row = f / (BK / 4), kq = f % (BK / 4);
    xok[i] = m0 + row < M;
    xsrc[i] = x + (size_t)(xok[i] ? m0 + row : 0) * K + kq * 4;
    xdst[i] = kq * 4 * S::BMP + row;
  }
  const uint32_t* wsrc[S::WV];
  bool wok[S::WV];
  int wdst[S::WV];
#pragma unroll
  for (int i = 0; i < S::WV; ++i) {
    const int f = tid + i * S::NT, k = f / (BN / 4), nq = f % (BN / 4);
    wok[i] = n0 + nq * 4 < N;
    // word offset: W^T row k, columns n0 + 4 nq .. + 3 (two bf16 per 32-bit word)
    wsrc[i] = wt + ((size_t)k * N + (wok[i] ? n0 + nq * 4 : 0)) / 2;
    wdst[i] = k * BN + nq * 4;
  }
  const size_t w_step = (size_t)BK * N / 2;   // words per tile

  float4 xr[S::XV];
  uint2 wr[S::WV];
  auto load = [&](int t) {
#pragma unroll
    for (int i = 0; i < S::XV; ++i)
      xr[i] = xok[i] ? __ldg(reinterpret_cast<const float4*>(xsrc[i] + (size_t)t * BK)) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int i = 0; i < S::WV; ++i)
      wr[i] = wok[i] ? __ldg(reinterpret_cast<const uint2*>(wsrc[i] + t * w_step)) : make_uint2(0u, 0u);
  };
  auto store = [&](int buf) {
    float* xb = xs + buf * S::XS;
    float* wb = ws + buf * S::WS;
#pragma unroll
    for (int i = 0; i < S::XV; ++i) {
      xb[xdst[i]] = xr[i].x;
      xb[xdst[i] + S::BMP] = xr[i].y;
      xb[xdst[i] + 2 * S::BMP] = xr[i].z;
      xb[xdst[i] + 3 * S::BMP] = xr[i].w;
    }
#pragma unroll
    for (int i = 0; i < S::WV; ++i) {
      // bf16 -> FP32 is exact: the 16 bits become the high half of the word
      const uint2 u = wr[i];
      *reinterpret_cast<float4*>(wb + wdst[i]) =
          make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                      __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
    }
  };

  float total[TOTAL_SMEM ? 1 : TM][TOTAL_SMEM ? 1 : TN];
  // VEC_TOTAL: the running total as float4s ([TM * TN / 4][NT]): a quarter of the shared loads and
  // stores at each chain's end (the same __fadd_rn per output)
  constexpr bool VEC = TOTAL_SMEM && (FLAGS & VEC_TOTAL);
  float4* tot4 = reinterpret_cast<float4*>(tot);
  if (VEC) {
#pragma unroll
    for (int e = 0; e < TM * TN / 4; ++e) tot4[e * S::NT + tid] = make_float4(-0.0f, -0.0f, -0.0f, -0.0f);
  } else if (TOTAL_SMEM) {
#pragma unroll
    for (int e = 0; e < TM * TN; ++e) tot[e * S::NT + tid] = -0.0f;
  } else {
#pragma unroll
    for (int i = 0; i < (TOTAL_SMEM ? 1 : TM); ++i)
#pragma unroll
      for (int j = 0; j < (TOTAL_SMEM ? 1 : TN); ++j) total[i][j] = -0.0f;
  }

  const int T = K / BK;
  if (RING && threadIdx.x < NBUF) mbar_init(bars + threadIdx.x, S::NT);
  if (RING) __syncthreads();     // the mbarriers initialised before anyone arrives
  load(0);
  store(0);
  if (RING) mbar_arrive(bars);
  load(min(1, T - 1));
  if (!RING) __syncthreads();
  if (EARLY) mbar_wait(bars, 0);
  int t = 0;
  for (int c0 = 0; c0 < T; c0 += tiles_per_chain) {
    const int c1 = min(T, c0 + tiles_per_chain);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (; t < c1; ++t) {
      const int cur = RING ? t % 3 : t & 1;
      const int nxt = RING ? (cur == 2 ? 0 : cur + 1) : cur ^ 1;
      if (RING && !EARLY) mbar_wait(bars + cur, (t / 3) & 1);    // every thread's stores of tile t
      if (!RING && (FLAGS & LATE_STORE)) {
        // tile t + 1 (in registers) into the buffer tile t - 1 was read from, then tile t + 2's loads
        store(nxt);
        load(min(t + 2, T - 1));
      }
      const float* xb = xs + cur * S::XS + ty * 4;
      const float* wb = ws + cur * S::WS + tx * 4;
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float a[TM], b[TN];
#pragma unroll
        for (int g = 0; g < S::GM; ++g) {
          const float4 v = *reinterpret_cast<const float4*>(xb + kk * S::BMP + g * S::SGM);
          a[g * 4] = v.x; a[g * 4 + 1] = v.y; a[g * 4 + 2] = v.z; a[g * 4 + 3] = v.w;
        }
#pragma unroll
        for (int g = 0; g < S::GN; ++g) {
          const float4 v = *reinterpret_cast<const float4*>(wb + kk * BN + g * S::SGN);
          b[g * 4] = v.x; b[g * 4 + 1] = v.y; b[g * 4 + 2] = v.z; b[g * 4 + 3] = v.w;
        }
        if (EARLY && kk == BK - 1) mbar_wait(bars + nxt, ((t + 1) / 3) & 1);    // tile t + 1's stores
        fma_step<TM, TN, N_OUTER, (FLAGS >> ORDER_SHIFT) & 15>(acc, a, b);
        if (RING && kk == STORE_AFTER) {   // tile t + 1 stored and announced; tile t + 2 loaded
          store(nxt);
          mbar_arrive(bars + nxt);
          load(min(t + 2, T - 1));
        }
      }
      if (RING) continue;
      if (!(FLAGS & LATE_STORE)) {
        // Tile t + 1 (in registers since the last barrier) into the other buffer, whose last readers
        // passed that barrier; then tile t + 2's loads, issued before the barrier so that the compiler
        // cannot sink them below the FMAs (a load issued after the FMAs exposes its latency once per
        // tile). Unconditional: past the end the last tile is loaded and stored again, never read.
        store(nxt);
        load(min(t + 2, T - 1));
      }
      __syncthreads();
    }
    // the chain's partial onto the running total (__fadd_rn: never contracted into an FMA)
    if (VEC) {
#pragma unroll
      for (int e = 0; e < TM * TN / 4; ++e) {
        float4 p = tot4[e * S::NT + tid];
        const int i = e / (TN / 4), j = (e % (TN / 4)) * 4;
        p.x = __fadd_rn(p.x, acc[i][j]);
        p.y = __fadd_rn(p.y, acc[i][j + 1]);
        p.z = __fadd_rn(p.z, acc[i][j + 2]);
        p.w = __fadd_rn(p.w, acc[i][j + 3]);
        tot4[e * S::NT + tid] = p;
      }
    } else if (TOTAL_SMEM) {
      add_partial(tot, S::NT, tid, acc);
    } else {
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          total[TOTAL_SMEM ? 0 : i][TOTAL_SMEM ? 0 : j] = __fadd_rn(total[TOTAL_SMEM ? 0 : i][TOTAL_SMEM ? 0 : j], acc[i][j]);
    }
  }

  store_block<TM, TN, S::SGM, S::SGN>(y, bias, M, N, m0, n0, ty, tx, [&](int i, int g) {
    if constexpr (VEC) {
      return tot4[(i * TN / 4 + g) * S::NT + tid];
    } else {
      float v[4];
#pragma unroll
      for (int c = 0; c < 4; ++c)
        v[c] = TOTAL_SMEM ? tot[(i * TN + g * 4 + c) * S::NT + tid] : total[TOTAL_SMEM ? 0 : i][TOTAL_SMEM ? 0 : g * 4 + c];
      return make_float4(v[0], v[1], v[2], v[3]);
    }
  });
}

// What the runtime says of one compiled configuration's kernel, for each Variant's info(): its
// registers, its local (spilled) bytes and its programs per SM (-1, -1, 0 where it cannot say), and
// the first error (`prepared`: the configuration's own set-up, 0 if it has none or it succeeded).
struct KernelFacts {
  int err, registers, local_bytes, blocks_per_sm;
};

template <typename Kernel>
KernelFacts kernel_facts(Kernel kernel, int threads, size_t smem_bytes, int prepared) {
  cudaFuncAttributes attr;
  const int e = (int)cudaFuncGetAttributes(&attr, kernel);
  int blocks = 0;
  if (!prepared && !e) cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes);
  return {prepared ? prepared : e, e ? -1 : attr.numRegs, e ? -1 : (int)attr.localSizeBytes, blocks};
}

template <int BM, int BN, int BK, int TM, int TN, bool TOTAL_SMEM, int MINB, bool N_OUTER, int FLAGS>
struct Variant {
  using S = Shape<BM, BN, BK, TM, TN, TOTAL_SMEM, (FLAGS & MBAR_RING) ? 3 : 2>;
  static constexpr auto kernel = det_sgemm_kernel<BM, BN, BK, TM, TN, TOTAL_SMEM, MINB, N_OUTER, FLAGS>;

  static int prepare() {
    static int err = -1;
    if (err < 0) err = (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::smem_bytes);
    return err;
  }

  static int launch(const float* x, const uint32_t* wt, const float* bias, float* y, int M, int N, int K, int chain,
                    cudaStream_t stream) {
    if (K % BK || chain % BK || N % 4 || M <= 0 || N <= 0 || K <= 0) return -1;
    if (prepare()) {          // this device has less shared memory per program than the tile needs
      cudaGetLastError();     // (not sticky: cleared, so that later launches report their own)
      return -3;
    }
    dim3 grid((M + BM - 1) / BM, (N + BN - 1) / BN);
    kernel<<<grid, S::NT, S::smem_bytes, stream>>>(x, wt, bias, y, M, N, K, chain / BK);
    return (int)cudaGetLastError();
  }

  // fields: BM BN BK TM TN TOTAL_SMEM MINB threads smem_bytes registers local_bytes blocks_per_sm N_OUTER FLAGS
  static int info(int* out) {
    const KernelFacts f = kernel_facts(kernel, S::NT, S::smem_bytes, prepare());
    const int v[14] = {BM, BN, BK, TM, TN, TOTAL_SMEM, MINB, S::NT, (int)S::smem_bytes,
                       f.registers, f.local_bytes, f.blocks_per_sm, N_OUTER, FLAGS};
    for (int i = 0; i < 14; ++i) out[i] = v[i];
    return f.err;
  }
};

// The compiled configurations: BM BN BK TM TN TOTAL_SMEM MINB N_OUTER FLAGS (cuda_gemm.py names them
// in this order)
#define DET_SGEMM_VARIANTS(X)                \
  X(128, 128, 8, 8, 8, true, 2, false, 0)    \
  X(128, 128, 16, 8, 8, true, 2, false, 0)   \
  X(256, 128, 8, 16, 8, true, 1, false, 0)   \
  X(128, 128, 8, 8, 16, true, 2, false, 0)   \
  X(128, 128, 8, 8, 8, true, 2, true, 0)     \
  X(256, 128, 8, 16, 8, true, 1, true, 0)    \
  X(128, 128, 8, 8, 16, true, 2, true, 0)    \
  X(128, 128, 8, 8, 16, true, 2, true, 2)    \
  X(128, 128, 8, 8, 16, true, 2, true, 4)    \
  X(128, 128, 8, 8, 16, true, 2, true, 12)   \
  X(128, 128, 8, 8, 16, true, 2, false, 4)   \
  X(128, 128, 16, 8, 16, true, 2, true, 0)   \
  X(128, 128, 16, 8, 16, true, 2, true, 2)   \
  X(128, 128, 16, 8, 16, true, 2, true, 4)   \
  X(128, 128, 16, 8, 16, true, 2, true, 12)  \
  X(128, 128, 8, 8, 16, true, 2, true, 116)  \
  X(128, 128, 8, 8, 16, true, 2, true, 284)

#define DET_LAUNCH_CASE(BM, BN, BK, TM, TN, TS, MB, NO, FL) \
  if (variant == i++) return Variant<BM, BN, BK, TM, TN, TS, MB, NO, FL>::launch(x, wt, bias, y, M, N, K, chain, stream);
#define DET_INFO_CASE(BM, BN, BK, TM, TN, TS, MB, NO, FL) \
  if (variant == i++) return Variant<BM, BN, BK, TM, TN, TS, MB, NO, FL>::info(out);
#define DET_COUNT(BM, BN, BK, TM, TN, TS, MB, NO, FL) +1


// ---------------------------------------------------------------------------------------------------
// Decode (M <= MB): one program per (BN columns, chain j), all M rows; writes the chain's partial
// part[j][m][n] (the fold, a separate kernel, sums them in chain order). Each thread holds all MB rows
// of its TN adjacent columns and streams its own weights straight into registers, D rows per batch,
// the next batch in flight while the current one is multiplied (two register sets): the bytes in
// flight are D..2D rows x TN x 2 B per thread, with no barrier in the k loop. The chain's slice of x
// sits transposed in shared memory ([CHAIN][MB], read back as 16-byte broadcasts).
// Needs N % BN == 0, chains of GEMV_CHAIN k and K a multiple of 2D (the Python side checks).

constexpr int GEMV_CHAIN = 256;   // reference.py's CHAIN_K: the x slice's size is compiled in

template <int TN> struct WordsOf;                         // TN bf16 of a row as one load
template <> struct WordsOf<2> { using T = uint32_t; };
template <> struct WordsOf<4> { using T = uint2; };
template <> struct WordsOf<8> { using T = uint4; };

__device__ __forceinline__ void upcast(uint32_t u, float& lo, float& hi) {
  lo = __uint_as_float(u << 16);
  hi = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ void upcast(uint32_t u, float* f) { upcast(u, f[0], f[1]); }
__device__ __forceinline__ void upcast(uint2 u, float* f) { upcast(u.x, f[0], f[1]); upcast(u.y, f[2], f[3]); }
__device__ __forceinline__ void upcast(uint4 u, float* f) {
  upcast(u.x, f[0], f[1]); upcast(u.y, f[2], f[3]); upcast(u.z, f[4], f[5]); upcast(u.w, f[6], f[7]);
}

template <int MB, int TN, int NW, int D>
__global__ void __launch_bounds__(NW * 32)
det_gemv_kernel(const float* __restrict__ x, const uint16_t* __restrict__ wt, float* __restrict__ part,
                int M, int N, int K, int chain) {
  using W = typename WordsOf<TN>::T;
  constexpr int NT = NW * 32, BN = TN * NT;
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);            // [chain][MB]
  const int tid = threadIdx.x;
  const int j = blockIdx.y;
  const int k0 = j * chain, len = min(chain, K - k0);
  const int n = blockIdx.x * BN + tid * TN;
  const W* src = reinterpret_cast<const W*>(wt + (size_t)k0 * N + n);
  const size_t row = (size_t)N * 2 / sizeof(W);            // words per W^T row

  W wa[D], wb[D];
#pragma unroll
  for (int r = 0; r < D; ++r) wa[r] = __ldg(src + r * row);

  {  // x[m][k0 + k] -> xs[k][m] (zeros past M and past the chain): every load in flight at once
    constexpr int PER = (GEMV_CHAIN * MB + NT - 1) / NT;
    float v[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = tid + i * NT, m = e / GEMV_CHAIN, k = e % GEMV_CHAIN;
      v[i] = (m < M && k < len) ? __ldg(x + (size_t)m * K + k0 + k) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int e = tid + i * NT, m = e / GEMV_CHAIN, k = e % GEMV_CHAIN;
      if (m < MB) xs[k * MB + m] = v[i];
    }
  }
  __syncthreads();

  float acc[MB][TN];
#pragma unroll
  for (int m = 0; m < MB; ++m)
#pragma unroll
    for (int c = 0; c < TN; ++c) acc[m][c] = 0.0f;

  auto fma_rows = [&](const W* w, int kb) {
#pragma unroll
    for (int r = 0; r < D; ++r) {
      float f[TN];
      upcast(w[r], f);
      float xv[MB];
      if (MB % 4 == 0) {
#pragma unroll
        for (int q = 0; q < MB / 4; ++q) {
          const float4 v = reinterpret_cast<const float4*>(xs + (kb + r) * MB)[q];
          xv[4 * q] = v.x; xv[4 * q + 1] = v.y; xv[4 * q + 2] = v.z; xv[4 * q + 3] = v.w;
        }
      } else {
#pragma unroll
        for (int m = 0; m < MB; ++m) xv[m] = xs[(kb + r) * MB + m];
      }
#pragma unroll
      for (int m = 0; m < MB; ++m)
#pragma unroll
        for (int c = 0; c < TN; ++c) acc[m][c] = __fmaf_rn(xv[m], f[c], acc[m][c]);
    }
  };

  for (int kb = 0; kb < len; kb += 2 * D) {
    if (kb + D < len) {
#pragma unroll
      for (int r = 0; r < D; ++r) wb[r] = __ldg(src + (size_t)(kb + D + r) * row);
    }
    fma_rows(wa, kb);
    if (kb + 2 * D < len) {
#pragma unroll
      for (int r = 0; r < D; ++r) wa[r] = __ldg(src + (size_t)(kb + 2 * D + r) * row);
    }
    fma_rows(wb, kb + D);
  }

  float* out = part + (size_t)j * M * N + n;
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    if (m >= M) break;
#pragma unroll
    for (int c = 0; c < TN; ++c) out[(size_t)m * N + c] = acc[m][c];
  }
}

template <int MB, int TN, int NW, int D>
struct GemvVariant {
  static constexpr auto kernel = det_gemv_kernel<MB, TN, NW, D>;
  static constexpr int BN = TN * NW * 32;

  static size_t smem() { return (size_t)GEMV_CHAIN * MB * 4; }

  static int launch(const float* x, const uint16_t* wt, float* part, int M, int N, int K, int chain,
                    cudaStream_t stream) {
    if (M > MB || N % BN || chain != GEMV_CHAIN || K % (2 * D) || M <= 0 || K <= 0) return -1;
    static int err = -1;
    if (err < 0) err = (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem());
    if (err) return err;
    dim3 grid(N / BN, (K + chain - 1) / chain);
    kernel<<<grid, NW * 32, smem(), stream>>>(x, wt, part, M, N, K, chain);
    return (int)cudaGetLastError();
  }

  // fields: MB TN NW D threads block_n registers local_bytes blocks_per_sm (at a 256-k chain)
  static int info(int* out) {
    const KernelFacts f = kernel_facts(kernel, NW * 32, smem(), 0);
    const int v[9] = {MB, TN, NW, D, NW * 32, BN, f.registers, f.local_bytes, f.blocks_per_sm};
    for (int i = 0; i < 9; ++i) out[i] = v[i];
    return f.err;
  }
};

// The compiled decode configurations: MB TN NW D
#define DET_GEMV_VARIANTS(X) \
  X(1, 8, 4, 8)              \
  X(1, 4, 4, 16)             \
  X(1, 2, 4, 16)             \
  X(1, 4, 2, 16)             \
  X(8, 4, 4, 16)             \
  X(8, 2, 4, 16)             \
  X(8, 4, 2, 16)             \
  X(16, 2, 4, 16)            \
  X(16, 2, 8, 16)            \
  X(16, 4, 2, 8)             \
  X(16, 4, 4, 16)            \
  X(16, 2, 4, 8)             \
  X(16, 2, 2, 16)            \
  X(16, 4, 4, 8)             \
  X(16, 8, 2, 4)             \
  X(8, 8, 4, 8)

#define DET_GEMV_LAUNCH_CASE(MB, TN, NW, D) \
  if (variant == i++) return GemvVariant<MB, TN, NW, D>::launch(x, wt, part, M, N, K, chain, stream);
#define DET_GEMV_INFO_CASE(MB, TN, NW, D) \
  if (variant == i++) return GemvVariant<MB, TN, NW, D>::info(out);
#define DET_GEMV_COUNT(MB, TN, NW, D) +1

}  // namespace

extern "C" {

int det_gemv_variant_count() { return 0 DET_GEMV_VARIANTS(DET_GEMV_COUNT); }

int det_gemv_info(int variant, int* out) {
  int i = 0;
  DET_GEMV_VARIANTS(DET_GEMV_INFO_CASE)
  return -2;
}

int det_gemv(int variant, const void* x_, const void* wt_, void* part_, int M, int N, int K, int chain, void* stream_) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const float* x = static_cast<const float*>(x_);
  const uint16_t* wt = static_cast<const uint16_t*>(wt_);
  float* part = static_cast<float*>(part_);
  int i = 0;
  DET_GEMV_VARIANTS(DET_GEMV_LAUNCH_CASE)
  return -2;
}


int det_sgemm_variant_count() { return 0 DET_SGEMM_VARIANTS(DET_COUNT); }

int det_sgemm_info(int variant, int* out) {
  int i = 0;
  DET_SGEMM_VARIANTS(DET_INFO_CASE)
  return -2;
}

int det_sgemm(int variant, const void* x_, const void* wt_, const void* bias_, void* y_, int M, int N, int K, int chain,
              void* stream_) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const float* x = static_cast<const float*>(x_);
  const uint32_t* wt = static_cast<const uint32_t*>(wt_);
  const float* bias = static_cast<const float*>(bias_);
  float* y = static_cast<float*>(y_);
  int i = 0;
  (void)i;
  DET_SGEMM_VARIANTS(DET_LAUNCH_CASE)
  return -2;
}

}  // extern "C"

#include "det_decode.cu"   // the second decode kernel (M <= 16), its own entry points

#include "det_prefill_ws.cu"   // the warp-specialized prefill kernel, its own entry points
