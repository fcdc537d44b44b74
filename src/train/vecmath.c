/*
 * vecmath.c - training's elementwise loops (see vecmath.h): an AVX-512 body and a plain C twin
 * of each, picked once per process.
 */
#include "train/vecmath.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/gemm.h"

int train_avx512_enabled(void)
{
    static int state; /* 0 unknown, 1 no, 2 yes */
    int v = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (!v) {
        const char *isa = getenv("AGENTFLOW_ISA");
        const int off = isa && (!strcmp(isa, "ref") || !strcmp(isa, "avx2"));
        v = train_gemm_has_avx512() && !off ? 2 : 1;
        __atomic_store_n(&state, v, __ATOMIC_RELEASE);
    }
    return v == 2;
}

/* ---- plain C ---------------------------------------------------------------------------- */

static float scale_max_c(float *x, int64_t n, float a)
{
    float mx = x[0] * a;
    for (int64_t j = 0; j < n; j++) {
        x[j] *= a;
        mx = x[j] > mx ? x[j] : mx;
    }
    return mx;
}

static double exp_sum_c(float *x, int64_t n, float a, float b)
{
    double sum = 0;
    for (int64_t j = 0; j < n; j++) {
        x[j] = expf(x[j] * a - b);
        sum += (double)x[j];
    }
    return sum;
}

static void scale_c(float *x, int64_t n, float a)
{
    for (int64_t j = 0; j < n; j++)
        x[j] *= a;
}

static void swiglu_fwd_c(const float *gate, const float *up, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

/* silu(g) = g σ(g); silu'(g) = σ(g) (1 + g (1 − σ(g))). */
static void swiglu_bwd_c(const float *dout, const float *gate, const float *up, int64_t n,
                         float *dgate, float *dup)
{
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        if (dgate)
            dgate[i] += dout[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (dup)
            dup[i] += dout[i] * g * s;
    }
}

/* ---- AVX-512 ---------------------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AF_TARGET_AVX512 __attribute__((target("avx512f")))
#define AF_INLINE512 AF_TARGET_AVX512 static inline __attribute__((always_inline))

static inline __mmask16 tail_mask(int64_t left)
{
    return (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
}

/* exp(x): n = round(x·log2 e), r = x − n·ln 2 in two parts, e^r by Cephes' degree-6
 * polynomial, scaled by 2^n with scalef (which gives 0 and inf past the range). */
AF_INLINE512 __m512 exp512(__m512 x)
{
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512 xc =
        _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-110.0f)), _mm512_set1_ps(110.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_mask_blend_ps(nan, _mm512_scalef_ps(p, n), x);
}

AF_TARGET_AVX512 static float scale_max_512(float *x, int64_t n, float a)
{
    const __m512 va = _mm512_set1_ps(a);
    __m512 mx = _mm512_set1_ps(x[0] * a);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = tail_mask(n - j);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), va);
        _mm512_mask_storeu_ps(x + j, m, v);
        mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    return _mm512_reduce_max_ps(mx);
}

AF_TARGET_AVX512 static double exp_sum_512(float *x, int64_t n, float a, float b)
{
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = tail_mask(n - j);
        const __m512 e = _mm512_maskz_mov_ps(
            m, exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + j), va, vb)));
        _mm512_mask_storeu_ps(x + j, m, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(
            s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

AF_TARGET_AVX512 static void scale_512(float *x, int64_t n, float a)
{
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = tail_mask(n - j);
        _mm512_mask_storeu_ps(x + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), va));
    }
}

/* σ(g) = 1 / (1 + e^-g) */
AF_INLINE512 __m512 sigmoid512(__m512 g)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
}

AF_TARGET_AVX512 static void swiglu_fwd_512(const float *gate, const float *up, int64_t n,
                                            float *out)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid512(g)), u));
    }
}

AF_TARGET_AVX512 static void swiglu_bwd_512(const float *dout, const float *gate, const float *up,
                                            int64_t n, float *dgate, float *dup)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), d = _mm512_maskz_loadu_ps(m, dout + i);
        const __m512 s = sigmoid512(g);
        if (dgate) {
            const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
            const __m512 ds = _mm512_fmadd_ps(g, _mm512_sub_ps(one, s), one);
            const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(d, u), s), ds);
            _mm512_mask_storeu_ps(dgate + i, m,
                                  _mm512_add_ps(_mm512_maskz_loadu_ps(m, dgate + i), v));
        }
        if (dup) {
            const __m512 v = _mm512_mul_ps(_mm512_mul_ps(d, g), s);
            _mm512_mask_storeu_ps(dup + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dup + i), v));
        }
    }
}
#define HAVE_512 1
#else
#define HAVE_512 0
#endif

/* ---- dispatch --------------------------------------------------------------------------- */

float train_vec_scale_max(float *x, int64_t n, float a)
{
#if HAVE_512
    if (train_avx512_enabled())
        return scale_max_512(x, n, a);
#endif
    return scale_max_c(x, n, a);
}

double train_vec_exp_sum(float *x, int64_t n, float a, float b)
{
#if HAVE_512
    if (train_avx512_enabled())
        return exp_sum_512(x, n, a, b);
#endif
    return exp_sum_c(x, n, a, b);
}

void train_vec_scale(float *x, int64_t n, float a)
{
#if HAVE_512
    if (train_avx512_enabled()) {
        scale_512(x, n, a);
        return;
    }
#endif
    scale_c(x, n, a);
}

void train_vec_swiglu_fwd(const float *gate, const float *up, int64_t n, float *out)
{
#if HAVE_512
    if (train_avx512_enabled()) {
        swiglu_fwd_512(gate, up, n, out);
        return;
    }
#endif
    swiglu_fwd_c(gate, up, n, out);
}

void train_vec_swiglu_bwd(const float *dout, const float *gate, const float *up, int64_t n,
                          float *dgate, float *dup)
{
#if HAVE_512
    if (train_avx512_enabled()) {
        swiglu_bwd_512(dout, gate, up, n, dgate, dup);
        return;
    }
#endif
    swiglu_bwd_c(dout, gate, up, n, dgate, dup);
}
