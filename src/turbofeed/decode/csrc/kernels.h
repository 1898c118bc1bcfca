/* The resampling kernels (kernels.c): the two separable passes over RGBX rows, in
 * scalar C, SSE2 and AVX2, all giving the same bytes. No Python, no libjpeg. */
#ifndef TF_KERNELS_H
#define TF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* The horizontal pass of nrows <= 8 rows: row r at rows + r * rstride, its pixel 0
 * being image column xoff, into c->n RGBX pixels at dst + r * dstride. lo and cols are
 * the first column and the count of columns any output pixel reads; T and O are the
 * AVX2 block's transposes (Layout's T_at and O_at). Reads and writes past the rows and
 * the output rows as layout_rows allows (rows past nrows, up to 8, give junk). */
void tf_horizontal_rows(const uint8_t *rows, size_t rstride, int nrows, int xoff, int lo, int cols, const Coeffs *c,
                        uint8_t *T, uint8_t *O, uint8_t *dst, size_t dstride);

/* The vertical pass for output row yy: dst[i] = clip(sum_j k_j src[(first + j) * stride + i])
 * for i < nbytes. Reads and writes up to VEC - 1 bytes past nbytes. */
void tf_vertical(const uint8_t *src, size_t stride, int first, const Coeffs *c, int yy, uint8_t *dst, int nbytes);

/* RGBX pixels -> the R, G and B planes (mirrored when flip), 8 pixels at a time where the
 * AVX2 kernels are in use; returns how many output pixels from the left it wrote (a
 * multiple of 8, 0 without AVX2): the caller does the rest. */
int tf_planes(const uint8_t *rgbx, int w, int flip, uint8_t *r, uint8_t *g, uint8_t *b);

/* "avx2", "sse2" or "none": the kernels in use. */
const char *tf_simd_level(void);

/* Use the kernels of level ("best", "avx2", "sse2" or "none"); -1 where this build or
 * CPU lacks them. Not thread-safe: at import, and in tests and benchmarks. */
int tf_simd_select(const char *level);

#endif
