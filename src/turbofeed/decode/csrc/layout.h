/* The memory layout of one resample call, computed once and read by everything that
 * allocates, places or walks a buffer (resample.c, kernels.c).
 *
 * layout_coeffs() lays out the coefficient buffer from the box and the output size;
 * layout_rows() lays out the decoded rows and the work buffer once the coefficients say
 * which rows and columns the filter reads and the source says how wide its rows are.
 * Each size and offset below is computed in exactly one place.
 *
 * The SIMD kernels read and write past the ends of rows (zero weights, whole 8-pixel
 * groups, 16/32-byte vectors): the margins for that are part of the layout (over, VEC,
 * strides rounded up to 8 pixels), and every buffer gets SLACK bytes more.
 */
#ifndef TF_LAYOUT_H
#define TF_LAYOUT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define PRECISION_BITS 22 /* Pillow's 8-bit resampling precision */
#define HALF (1 << (PRECISION_BITS - 1))
#define SPLIT 11          /* k = hi << SPLIT | lo */
#define PS 4              /* bytes per decoded pixel (RGBX) */
#define BATCH 16          /* rows asked from a source per call */
#define SLACK 64          /* bytes after every scratch buffer: the SIMD loops read/write past the end */
#define VEC 32            /* the vertical pass reads and writes up to VEC - 1 bytes past a row */

/* One direction's coefficients: where they sit in the coefficient buffer, and the
 * filter's scale (Pillow's precompute_coeffs). */
typedef struct {
    int n;              /* output pixels */
    int ksize;          /* Pillow's maximum taps: the stride of k */
    int kpairs;         /* pairs of taps at most: the stride of hi and lo, in quads */
    double scale;       /* input pixels per output pixel */
    double filterscale; /* max(scale, 1) */
    size_t quads;       /* uint32 entries in hi and in lo each: n * kpairs * 4 */
    size_t bytes;       /* hi, lo, k and bounds in this order, rounded up to 64 */
} CoeffsLayout;

/* Resampling coefficients of one direction, placed in memory by coeffs_place. */
typedef struct {
    int n, ksize, kpairs; /* as in CoeffsLayout */
    int *bounds;          /* (first input pixel, taps) per output pixel; taps may be 0 */
    int32_t *k;           /* Pillow's fixed-point coefficients, ksize per output pixel */
    /* Pairs of taps (hi_2t | hi_2t+1 << 16) for pmaddwd, an odd count padded with 0, each
     * repeated 4 times (one 128-bit register): pair t of output pixel x is at QUAD(x, t),
     * 4 x uint32. Zeros after the last pair of a pixel. */
    uint32_t *hi;
    uint32_t *lo;
} Coeffs;

#define QUAD(c, x, t) (((size_t)(x) * (size_t)(c)->kpairs + (size_t)(t)) * 4)

/* Everything one call allocates. Filled by layout_coeffs, then layout_rows. */
typedef struct {
    int horizontal_first; /* Pillow 13's pass order */
    CoeffsLayout ch, cv;  /* in the coefficient buffer at 0 and at ch.bytes */
    size_t coef_bytes;    /* the coefficient buffer */
    size_t weight_bytes;  /* one output pixel's double weights */
    size_t ostride;       /* bytes per row of resampled pixels: out_w rounded up to 8 */
    size_t stride;        /* bytes per decoded row: the source's width */
    size_t mstride;       /* bytes per row of mid */
    size_t rows_bytes;    /* the decoded rows: 8 (horizontal first) or all of them */
    /* The work buffer: mid (the first pass's result) at 0, then lines (output rows),
     * T and O (the AVX2 block transposes). */
    size_t lines_at, T_at, O_at, tmp_bytes;
} Layout;

static inline size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

static inline CoeffsLayout coeffs_layout(float in0, float in1, int n) {
    CoeffsLayout l;
    l.n = n;
    l.scale = (double)(in1 - in0) / n;
    l.filterscale = l.scale < 1.0 ? 1.0 : l.scale;
    l.ksize = (int)ceil(1.0 * l.filterscale) * 2 + 1;
    l.kpairs = l.ksize / 2 + 1;
    l.quads = (size_t)n * (size_t)l.kpairs * 4;
    const size_t bytes = 2 * l.quads * sizeof(uint32_t) + (size_t)n * (size_t)l.ksize * sizeof(int32_t) +
                         (size_t)n * 2 * sizeof(int);
    l.bytes = (bytes + 63) & ~(size_t)63; /* keeps the next block aligned */
    return l;
}

/* The coefficients of the box (x0, y0, x1, y1) of an IW x IH image resized to
 * out_w x out_h. */
static inline void layout_coeffs(Layout *L, int IW, int IH, float x0, float y0, float x1, float y1, int out_w,
                                 int out_h) {
    /* Pillow 13's order (ImagingResampleInner): vertical first when the height shrinks
     * more than twice as much as the width, in pixels of the whole image. The rounding
     * between the passes makes the order visible. */
    L->horizontal_first = !((IH - out_h) > 0 && (IH - out_h) > (IW - out_w) * 2);
    L->ch = coeffs_layout(x0, x1, out_w);
    L->cv = coeffs_layout(y0, y1, out_h);
    L->coef_bytes = L->ch.bytes + L->cv.bytes;
    L->weight_bytes = (size_t)(L->ch.ksize > L->cv.ksize ? L->ch.ksize : L->cv.ksize) * sizeof(double);
    L->ostride = round8((size_t)out_w) * PS;
}

/* The rows buffer and the work buffer for `rows` x `cols` input pixels read by the
 * filter, from decoded rows `width` pixels wide.
 * Horizontal first: 8 rows at a time, resampled at once into mid (rows x out_w).
 * Vertical first: all rows kept, then 8 output rows at a time through mid (8 x cols).
 * Row strides are rounded up to 8 pixels (the block kernels write whole 8-pixel groups);
 * the horizontal pass may read (kpairs * 2 + 1) pixels past the last one it uses (zero
 * weights), the vertical pass VEC - 1 bytes past a row. */
static inline void layout_rows(Layout *L, int rows, int cols, int width) {
    const size_t over = (size_t)(L->ch.kpairs * 2 + 2) * PS + VEC;
    L->stride = (size_t)width * PS;
    L->mstride = L->horizontal_first ? L->ostride : round8((size_t)cols) * PS;
    L->rows_bytes = L->stride * (L->horizontal_first ? 8 : (size_t)rows) + over;
    const size_t mid_bytes = (L->horizontal_first ? round8((size_t)rows) : 8) * L->mstride + over;
    const size_t lines_bytes = 8 * L->ostride + VEC;
    const size_t T_bytes = (round8((size_t)cols) + 8) * 32, O_bytes = round8((size_t)L->ch.n) * 32;
    L->lines_at = mid_bytes;
    L->T_at = L->lines_at + lines_bytes;
    L->O_at = L->T_at + T_bytes;
    L->tmp_bytes = L->O_at + O_bytes;
}

#endif
