// Deterministic FP32-FMA GEMM for large M, warp-specialized (issue 16, call 13). det_sgemm.cu
// includes this file at its end (one library, one build); cuda_gemm.py's cache key covers it.
//
// The order is reference.py's and det_sgemm.cu's tile kernel's: every output (m, n) is chains of
// `chain` consecutive k, each a sequential FMA chain from +0.0 over k ascending, the chain partials
// added left to right onto a running total from -0.0 (kept in shared memory), bias last. The tile is
// that kernel's adopted thread block (8 x 16 outputs per thread as 2 x 4 groups of 4 x 4, x^T and W^T
// FP32 in shared memory, 16-byte shared loads, BK k per tile): the same FMAs per output in the same
// order, so the same bits.
//
// What differs: one program per SM of three warpgroups, 256 x 128 outputs (det_sgemm.cu: two
// programs of 128 x 128). Warpgroups 0 and 1 (the consumers, 128 rows each) only wait, multiply from
// shared memory and release the buffer on its `empty` mbarrier; warpgroup 2 (the producer) alone
// loads the tiles (x as float4 of 4 k of one row, W^T as 4 bf16 of one row), upcasts W, stores x
// transposed and W FP32 into a ring of STAGES buffers and announces each on the buffer's `full`
// mbarrier. So the consumers' loop holds no staging registers and issues no global loads, upcasts
// or shared stores, and each SM sub-partition runs two consumer warps and one producer warp.
// A producer thread keeps LA tiles of loads in flight (LA register sets). Call 13: with one, rings
// of 4, 5, 7 and 8 buffers took 2-4 % more time than a ring of 6 (more long-scoreboard stalls);
// with two, rings of 4, 6 and 8 ran as fast as that ring of 6.
// Registers: a sub-partition holds 3 warps, so the launch gives 168 a thread; setmaxnreg moves
// them from the producer (56; 88 at BK x LA = 16) to the consumers (224; 208).
// A consumer loads the next k step's fragments one step ahead, across tiles too: before the last
// k step's FMAs of tile t it waits for tile t + 1 and loads that tile's first fragments, and it
// releases tile t after them.
// Needs K % BK == 0, chain % BK == 0, N % 4 == 0, 16-byte aligned x and y, 8-byte W^T.
#include <cuda_runtime.h>
#include <stdint.h>

namespace det_pws {

constexpr int BM = 256, BN = 128, TM = 8, TN = 16;
constexpr int CONSUMERS = (BM / TM) * (BN / TN);     // 256 threads: 32 x 8, warps of 4 x 8 along M
constexpr int PRODUCERS = 128;                       // one warpgroup
constexpr int THREADS = CONSUMERS + PRODUCERS;
constexpr int GM = TM / 4, GN = TN / 4;              // 4-wide groups per thread
constexpr int SGM = BM / GM, SGN = BN / GN;          // distance between a thread's groups
constexpr int BMP = BM + 4;                          // padded x^T row: conflict-free transposing stores

template <int BK, int STAGES, int LA>
struct Shape {
  static constexpr int XS = BK * BMP, STAGE = XS + BK * BN;     // floats: x^T then W^T
  static constexpr int XV = BM * BK / 4 / PRODUCERS;            // float4 of x per producer thread
  static constexpr int WV = BN * BK / 4 / PRODUCERS;            // 4 x bf16 of W per producer thread
  // registers a thread: the producer's staging grows with BK and LA; 8 x CREGS + 4 x PREGS = 12 x 168
  static constexpr int PREGS = BK * LA == 8 ? 56 : 88, CREGS = (12 * 168 - 4 * PREGS) / 8;
  static constexpr size_t smem_bytes = (size_t)(STAGES * STAGE + BM * BN) * 4 + 2 * STAGES * 8;
  static_assert(BK % 4 == 0 && XV * PRODUCERS * 4 == BM * BK && WV * PRODUCERS * 4 == BN * BK,
                "the producer threads cover the tiles");
  static_assert((STAGES * STAGE + BM * BN) % 2 == 0, "mbarriers 8-byte aligned");
  static_assert(LA == 1 || (LA == 2 && STAGES % 2 == 0), "two register sets alternate within a round");
};

template <int BK, int STAGES, bool N_OUTER, int LA>
__global__ void __launch_bounds__(THREADS, 1)
det_ws_kernel(const float* __restrict__ x, const uint2* __restrict__ wt, const float* __restrict__ bias,
              float* __restrict__ y, int M, int N, int K, int tiles_per_chain) {
  using S = Shape<BK, STAGES, LA>;
  extern __shared__ float4 smem4[];
  float* ring = reinterpret_cast<float*>(smem4);           // [STAGES][x^T BK x BMP, W^T BK x BN]
  float* tot = ring + STAGES * S::STAGE;                   // [TM * TN][CONSUMERS] running totals
  uint64_t* full = reinterpret_cast<uint64_t*>(tot + BM * BN);
  uint64_t* empty = full + STAGES;
  const int tid = threadIdx.x;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int T = K / BK;
  if (tid < STAGES) {
    mbar_init(full + tid, PRODUCERS);
    mbar_init(empty + tid, CONSUMERS);
  }
  __syncthreads();      // the mbarriers initialised before anyone waits or arrives

  if (tid >= CONSUMERS) {
    // the producer warpgroup: its share of every tile
#ifdef __CUDA_ARCH_FEAT_SM90_ALL     // sm_90a (cuda_gemm.py builds it for compute capability 9.0)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(S::PREGS));
#endif
    const int p = tid - CONSUMERS;
    // Rows past M and columns past N read row M - 1 and column 0 instead: only outputs that are
    // never stored see them (no predicates, no zeros in the loop).
    const float* xsrc[S::XV];
    int xdst[S::XV];
#pragma unroll
    for (int i = 0; i < S::XV; ++i) {
      // threads take consecutive 16-byte pieces of a row's BK k: whole 32-byte sectors from global,
      // and (BK = 8) a warp's transposing stores hit 32 different banks
      const int f = p + PRODUCERS * i, row = f / (BK / 4), kq = f % (BK / 4);
      xsrc[i] = x + (size_t)min(m0 + row, M - 1) * K + kq * 4;
      xdst[i] = kq * 4 * BMP + row;
    }
    // W^T: a warp takes one row of the tile, 4 columns a thread (one 512-byte shared store)
    const int wq = p % 32, wk = p / 32;
    const size_t w_row = (size_t)N / 4;         // uint2 (4 bf16) per W^T row
    const uint2* wsrc = wt + (size_t)(n0 + wq * 4 < N ? n0 + wq * 4 : 0) / 4 + wk * w_row;
    float4 xr[LA][S::XV];     // LA tiles' loads in flight: register set t % LA holds tile t
    uint2 wr[LA][S::WV];
    auto load = [&](int r) {  // the next tile not yet loaded into register set r
#pragma unroll
      for (int i = 0; i < S::XV; ++i) {
        xr[r][i] = __ldg(reinterpret_cast<const float4*>(xsrc[i]));
        xsrc[i] += BK;
      }
#pragma unroll
      for (int i = 0; i < S::WV; ++i) wr[r][i] = __ldg(wsrc + i * (PRODUCERS / 32) * w_row);
      wsrc += BK * w_row;
    };
#pragma unroll
    for (int r = 0; r < LA; ++r)
      if (r < T) load(r);
    int ph = 0;                       // the parity of round t0 / STAGES
    for (int t0 = 0; t0 < T; t0 += STAGES, ph ^= 1) {
#pragma unroll
      for (int s = 0; s < STAGES; ++s) {
        if (t0 + s >= T) break;
        if (t0 > 0) mbar_wait(empty + s, ph ^ 1);      // the consumers released tile t0 + s - STAGES
        float* xb = ring + s * S::STAGE;
        float* wb = xb + S::XS + wk * BN + wq * 4;
#pragma unroll
        for (int i = 0; i < S::XV; ++i) {
          const float4 v = xr[s % LA][i];
          xb[xdst[i]] = v.x;
          xb[xdst[i] + BMP] = v.y;
          xb[xdst[i] + 2 * BMP] = v.z;
          xb[xdst[i] + 3 * BMP] = v.w;
        }
#pragma unroll
        for (int i = 0; i < S::WV; ++i) {
          // bf16 -> FP32 is exact: the 16 bits become the high half of the word
          const uint2 u = wr[s % LA][i];
          *reinterpret_cast<float4*>(wb + i * (PRODUCERS / 32) * BN) =
              make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                          __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
        }
        mbar_arrive(full + s);
        if (t0 + s + LA < T) load(s % LA);   // in flight while this thread waits for free buffers
      }
    }
    return;
  }

  // the consumers: det_sgemm.cu's thread layout (a warp 4 x 8 threads, warps along M)
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(S::CREGS));
#endif
  const int warp = tid / 32, lane = tid % 32;
  const int ty = warp * 4 + lane / 8, tx = lane % 8;
#pragma unroll
  for (int e = 0; e < TM * TN; ++e) tot[e * CONSUMERS + tid] = -0.0f;

  auto frag = [&](const float* st, int kk, float* a, float* b) {
    const float* xb = st + kk * BMP + ty * 4;
    const float* wb = st + S::XS + kk * BN + tx * 4;
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(xb + g * SGM);
      a[g * 4] = v.x; a[g * 4 + 1] = v.y; a[g * 4 + 2] = v.z; a[g * 4 + 3] = v.w;
    }
#pragma unroll
    for (int g = 0; g < GN; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(wb + g * SGN);
      b[g * 4] = v.x; b[g * 4 + 1] = v.y; b[g * 4 + 2] = v.z; b[g * 4 + 3] = v.w;
    }
  };

  float a0[TM], b0[TN];
  mbar_wait(full, 0);
  frag(ring, 0, a0, b0);
  int s = 0, ph = 0;                  // tile t's buffer and the parity of its `full` phase
  int t = 0;
  for (int c0 = 0; c0 < T; c0 += tiles_per_chain) {
    const int c1 = min(T, c0 + tiles_per_chain);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (; t < c1; ++t) {
      const float* st = ring + s * S::STAGE;
      const int s1 = s + 1 == STAGES ? 0 : s + 1;
      const int ph1 = s1 == 0 ? ph ^ 1 : ph;
#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        float a1[TM], b1[TN];
        if (kk + 1 < BK) {
          frag(st, kk + 1, a1, b1);
        } else {     // tile t + 1's first fragments, behind this step's FMAs (past the last tile:
                     // a stale buffer's, never used; read anyway so that no branch keeps old values)
          if (t + 1 < T) mbar_wait(full + s1, ph1);
          frag(ring + s1 * S::STAGE, 0, a1, b1);
        }
        fma_step<TM, TN, N_OUTER, 0>(acc, a0, b0);     // det_sgemm.cu's
        if (kk + 1 == BK) mbar_arrive(empty + s);     // every read of tile t has landed
#pragma unroll
        for (int i = 0; i < TM; ++i) a0[i] = a1[i];
#pragma unroll
        for (int j = 0; j < TN; ++j) b0[j] = b1[j];
      }
      s = s1;
      ph = ph1;
    }
    add_partial(tot, CONSUMERS, tid, acc);     // the chain's partial onto the running total
  }
  store_block<TM, TN, SGM, SGN>(y, bias, M, N, m0, n0, ty, tx, [&](int i, int g) {
    const float* t = tot + (i * TN + g * 4) * CONSUMERS + tid;
    return make_float4(t[0], t[CONSUMERS], t[2 * CONSUMERS], t[3 * CONSUMERS]);
  });
}

template <int BK, int STAGES, bool N_OUTER, int LA>
struct WsVariant {
  using S = Shape<BK, STAGES, LA>;
  static constexpr auto kernel = det_ws_kernel<BK, STAGES, N_OUTER, LA>;

  static int prepare() {
    static int err = -1;
    if (err < 0) err = (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)S::smem_bytes);
    return err;
  }

  static int launch(const float* x, const uint2* wt, const float* bias, float* y, int M, int N, int K, int chain,
                    cudaStream_t stream) {
    if (K % BK || chain % BK || N % 4 || M <= 0 || N <= 0 || K <= 0) return -1;
    if (prepare()) {          // less shared memory per program than the tile needs (det_sgemm's -3)
      cudaGetLastError();
      return -3;
    }
    dim3 grid((M + BM - 1) / BM, (N + BN - 1) / BN);
    kernel<<<grid, THREADS, S::smem_bytes, stream>>>(x, wt, bias, y, M, N, K, chain / BK);
    return (int)cudaGetLastError();
  }

  // fields: BK STAGES N_OUTER LA threads smem_bytes registers local_bytes blocks_per_sm
  static int info(int* out) {
    const KernelFacts f = kernel_facts(kernel, THREADS, S::smem_bytes, prepare());  // det_sgemm.cu's
    const int v[9] = {BK, STAGES, N_OUTER, LA, THREADS, (int)S::smem_bytes, f.registers, f.local_bytes,
                      f.blocks_per_sm};
    for (int i = 0; i < 9; ++i) out[i] = v[i];
    return f.err;
  }
};

// The compiled configurations: BK STAGES N_OUTER LA (k per tile, ring buffers, the FMA order of a
// k step: columns outer or rows outer, tiles of loads in flight per producer thread); cuda_gemm.py
// reads this table.
#define DET_WS_VARIANTS(X) \
  X(8, 4, true, 2)         \
  X(8, 6, true, 1)

#define DET_WS_LAUNCH_CASE(BK, P, NO, LA) \
  if (variant == i++) return WsVariant<BK, P, NO, LA>::launch(x, wt, bias, y, M, N, K, chain, stream);
#define DET_WS_INFO_CASE(BK, P, NO, LA) \
  if (variant == i++) return WsVariant<BK, P, NO, LA>::info(out);
#define DET_WS_COUNT(BK, P, NO, LA) +1

}  // namespace det_pws

extern "C" {

int det_ws_variant_count() { return 0 DET_WS_VARIANTS(DET_WS_COUNT); }

int det_ws_info(int variant, int* out) {
  using namespace det_pws;
  int i = 0;
  DET_WS_VARIANTS(DET_WS_INFO_CASE)
  return -2;
}

int det_ws(int variant, const void* x_, const void* wt_, const void* bias_, void* y_, int M, int N, int K, int chain,
           void* stream_) {
  using namespace det_pws;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const float* x = static_cast<const float*>(x_);
  const uint2* wt = static_cast<const uint2*>(wt_);
  const float* bias = static_cast<const float*>(bias_);
  float* y = static_cast<float*>(y_);
  int i = 0;
  DET_WS_VARIANTS(DET_WS_LAUNCH_CASE)
  return -2;
}

}  // extern "C"
