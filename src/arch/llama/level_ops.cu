// The fused operations of a level pass on the GPU (issue 38): rope and the arena write in
// one kernel, ragged segment attention in one kernel, the gated activation in one kernel.
// Compiled at run time by NVRTC (no header: bf16 and f16 are converted by hand), loaded
// once per device. `level_ops.rs` holds the CPU implementations, which follow the same
// loops and the same update order; keep the two in step.
//
// Layouts (row-major, contiguous):
//   projected (tokens, q_width + 2 * kv_width): queries, keys, values of each token;
//   arena     (positions, 2 * kv_width): keys then values of each arena position;
//   cos, sin  (tokens, rotary_dim / 2): rope tables at each token's position;
//   meta (u32): destinations[tokens], range_offsets[tokens + 1], query_positions[tokens],
//               then (start, end, first key's sequence position) per range.

// NVRTC compiles without the host math headers, which define the infinity macro.
#define NEG_INF __int_as_float(0xff800000)

struct bf16_t { unsigned short bits; };
struct f16_t { unsigned short bits; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16_t x) {
    return __uint_as_float(((unsigned)x.bits) << 16);
}
__device__ __forceinline__ float to_f32(f16_t x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}

template <typename T> __device__ __forceinline__ T of_f32(float x);
template <> __device__ __forceinline__ float of_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16_t of_f32<bf16_t>(float x) {
    unsigned u = __float_as_uint(x);
    bf16_t r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = 0x7fc0;  // NaN stays NaN
    } else {
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
        r.bits = (unsigned short)(u >> 16);
    }
    return r;
}
template <> __device__ __forceinline__ f16_t of_f32<f16_t>(float x) {
    f16_t r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
    return r;
}

// Element j of a rotated head `x` (head_dim values), rope tables `c`, `s` of one token.
template <typename T>
__device__ __forceinline__ float rotated(const T* x, const T* c, const T* s, int j,
                                         int rotary_dim, int interleaved) {
    if (j >= rotary_dim) return to_f32(x[j]);
    int half = rotary_dim / 2;
    if (interleaved) {
        int p = j / 2;
        float cp = to_f32(c[p]), sp = to_f32(s[p]);
        return (j % 2 == 0) ? to_f32(x[j]) * cp - to_f32(x[j + 1]) * sp
                            : to_f32(x[j - 1]) * sp + to_f32(x[j]) * cp;
    }
    if (j < half) return to_f32(x[j]) * to_f32(c[j]) - to_f32(x[j + half]) * to_f32(s[j]);
    int p = j - half;
    return to_f32(x[j]) * to_f32(c[p]) + to_f32(x[p]) * to_f32(s[p]);
}

// One block per token: its keys rotated and its values copied to its arena position.
template <typename T>
__device__ void rope_store(const T* projected, const unsigned* meta, const T* cos,
                           const T* sin, T* arena, int q_width, int kv_width, int head_dim,
                           int rotary_dim, int interleaved) {
    int t = blockIdx.x;
    size_t row = (size_t)t * (q_width + 2 * kv_width);
    size_t dest = (size_t)meta[t] * 2 * kv_width;
    const T* c = cos + (size_t)t * (rotary_dim / 2);
    const T* s = sin + (size_t)t * (rotary_dim / 2);
    for (int i = threadIdx.x; i < kv_width; i += blockDim.x) {
        const T* head = projected + row + q_width + (i / head_dim) * head_dim;
        arena[dest + i] = of_f32<T>(rotated(head, c, s, i % head_dim, rotary_dim, interleaved));
        arena[dest + kv_width + i] = projected[row + q_width + kv_width + i];
    }
}

#define TILE 64

// One block per (token, head), one thread per head dimension (blockDim.x == head_dim):
// the token's ranges walked in tiles of TILE keys with an online softmax (running
// maximum, running sum, f32 accumulator); no score matrix is stored.
template <typename T>
__device__ void ragged_attention(const T* projected, const T* arena, const unsigned* meta,
                                 const T* cos, const T* sin, T* out, int tokens, int heads,
                                 int kv_heads, int head_dim, int rotary_dim, int interleaved,
                                 float scale, float softcap, int window) {
    __shared__ float q[1024];
    __shared__ float scores[TILE];
    __shared__ float max_s, sum_s, correction_s, new_max_s;
    int t = blockIdx.x, head = blockIdx.y, i = threadIdx.x;
    int q_width = heads * head_dim, kv_width = kv_heads * head_dim;
    int kv = head / (heads / kv_heads);
    const unsigned* offsets = meta + tokens;
    const unsigned* query_positions = meta + 2 * tokens + 1;
    const unsigned* ranges = meta + 3 * tokens + 1;
    const T* x = projected + (size_t)t * (q_width + 2 * kv_width) + head * head_dim;
    q[i] = rotated(x, cos + (size_t)t * (rotary_dim / 2), sin + (size_t)t * (rotary_dim / 2), i,
                   rotary_dim, interleaved);
    if (i == 0) {
        max_s = NEG_INF;
        sum_s = 0.f;
    }
    float acc = 0.f;
    unsigned query_position = query_positions[t];
    __syncthreads();
    for (unsigned r = offsets[t]; r < offsets[t + 1]; ++r) {
        unsigned start = ranges[3 * r], end = ranges[3 * r + 1], first = ranges[3 * r + 2];
        for (unsigned tile = start; tile < end; tile += TILE) {
            unsigned n = min((unsigned)TILE, end - tile);
            for (unsigned j = i; j < n; j += blockDim.x) {
                unsigned key_position = first + (tile - start) + j;
                float score = NEG_INF;
                if (window <= 0 || query_position - key_position < (unsigned)window) {
                    const T* k = arena + (size_t)(tile + j) * 2 * kv_width + kv * head_dim;
                    float dot = 0.f;
                    for (int d = 0; d < head_dim; ++d) dot += q[d] * to_f32(k[d]);
                    score = dot * scale;
                    if (softcap > 0.f) score = tanhf(score / softcap) * softcap;
                }
                scores[j] = score;
            }
            __syncthreads();
            if (i == 0) {
                float tile_max = NEG_INF;
                for (unsigned j = 0; j < n; ++j) tile_max = fmaxf(tile_max, scores[j]);
                new_max_s = fmaxf(max_s, tile_max);
                correction_s = new_max_s == NEG_INF ? 1.f : expf(max_s - new_max_s);
            }
            __syncthreads();
            float new_max = new_max_s, correction = correction_s;
            for (unsigned j = i; j < n; j += blockDim.x)
                scores[j] = new_max == NEG_INF ? 0.f : expf(scores[j] - new_max);
            __syncthreads();
            acc *= correction;
            for (unsigned j = 0; j < n; ++j)
                acc += scores[j] * to_f32(arena[(size_t)(tile + j) * 2 * kv_width + kv_width +
                                                kv * head_dim + i]);
            if (i == 0) {
                float tile_sum = 0.f;
                for (unsigned j = 0; j < n; ++j) tile_sum += scores[j];
                sum_s = sum_s * correction + tile_sum;
                max_s = new_max;
            }
            __syncthreads();
        }
    }
    float sum = sum_s;
    out[(size_t)t * q_width + head * head_dim + i] = of_f32<T>(sum > 0.f ? acc / sum : 0.f);
}

// out = act(gate) * up, rows of `width`; gate and up may be views with their own row
// strides (the two halves of one gate/up product). act 0: SiLU, 1: GELU (tanh form).
template <typename T>
__device__ void act_mul(const T* gate, const T* up, T* out, int rows, int width,
                        int gate_stride, int up_stride, int act) {
    size_t n = (size_t)rows * width;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / width, c = e % width;
        float g = to_f32(gate[r * gate_stride + c]);
        float u = to_f32(up[r * up_stride + c]);
        float a = act == 0 ? g / (1.f + expf(-g))
                           : 0.5f * g * (1.f + tanhf(0.7978845608028654f * g * (1.f + 0.044715f * g * g)));
        out[e] = of_f32<T>(a * u);
    }
}

#define LEVEL_KERNELS(T, SUFFIX)                                                              \
    extern "C" __global__ void level_rope_store_##SUFFIX(                                     \
        const T* projected, const unsigned* meta, const T* cos, const T* sin, T* arena,      \
        int q_width, int kv_width, int head_dim, int rotary_dim, int interleaved) {          \
        rope_store<T>(projected, meta, cos, sin, arena, q_width, kv_width, head_dim,          \
                      rotary_dim, interleaved);                                               \
    }                                                                                         \
    extern "C" __global__ void level_attention_##SUFFIX(                                      \
        const T* projected, const T* arena, const unsigned* meta, const T* cos,              \
        const T* sin, T* out, int tokens, int heads, int kv_heads, int head_dim,             \
        int rotary_dim, int interleaved, float scale, float softcap, int window) {           \
        ragged_attention<T>(projected, arena, meta, cos, sin, out, tokens, heads, kv_heads,   \
                            head_dim, rotary_dim, interleaved, scale, softcap, window);       \
    }                                                                                         \
    extern "C" __global__ void level_act_mul_##SUFFIX(const T* gate, const T* up, T* out,     \
                                                      int rows, int width, int gate_stride,   \
                                                      int up_stride, int act) {               \
        act_mul<T>(gate, up, out, rows, width, gate_stride, up_stride, act);                  \
    }

LEVEL_KERNELS(float, f32)
LEVEL_KERNELS(bf16_t, bf16)
LEVEL_KERNELS(f16_t, f16)
