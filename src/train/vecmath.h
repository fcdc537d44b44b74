/*
 * vecmath.h - the vector loops of training's elementwise ops (src/train/): the softmax rows of
 * attention and SwiGLU. With AVX-512 (and AGENTFLOW_ISA not ref or avx2) exp runs as a
 * 16-lane polynomial (Cephes' expf: 2^n · p(r), within 2 ulp of expf; exp of NaN is NaN, of
 * -inf 0, overflow inf), tails through masks so every element takes the same path; otherwise
 * plain C loops over libm's expf. Either way the result does not depend on the thread count.
 */
#ifndef AF_TRAIN_VECMATH_H
#define AF_TRAIN_VECMATH_H

#include <stdint.h>

/* 1 when training uses its AVX-512 kernels on this CPU (decided once per process). */
int train_avx512_enabled(void);

/* x[j] *= a for j < n; returns the largest scaled value (x[0] when n == 1; n >= 1). */
float train_vec_scale_max(float *x, int64_t n, float a);
/* x[j] = exp(x[j] · a − b); returns Σ x[j] (in double). */
double train_vec_exp_sum(float *x, int64_t n, float a, float b);
/* x[j] *= a. */
void train_vec_scale(float *x, int64_t n, float a);
/* out[j] = silu(gate[j]) · up[j]. */
void train_vec_swiglu_fwd(const float *gate, const float *up, int64_t n, float *out);
/* dgate[j] += dout·up·silu'(gate), dup[j] += dout·silu(gate); either may be NULL. */
void train_vec_swiglu_bwd(const float *dout, const float *gate, const float *up, int64_t n,
                          float *dgate, float *dup);

#endif
