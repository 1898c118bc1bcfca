/* The two resampling passes over RGBX rows (see kernels.h), exact and fast.
 *
 * On x86-64 the passes use pmaddwd on 16-bit numbers. Each 22-bit coefficient k is
 * split as k = hi * 2048 + lo (hi, lo < 2^11 + 1); both partial sums are exact in 32
 * bits and sum_j p_j k_j = 2048 * sum_j p_j hi_j + sum_j p_j lo_j is the same integer
 * Pillow computes, which the scalar kernels compute directly. Pixels are RGBX (4
 * bytes), so one 128-bit register holds two pixels' channels as (pixel j, pixel j+1)
 * pairs. With AVX2 (chosen at import when the CPU has it) the horizontal pass runs on 8
 * rows at once, transposed so that it becomes a vertical pass over columns.
 */
#include "kernels.h"

#include <string.h>

#if (defined(__SSE2__) || defined(_M_X64)) && !defined(TF_NO_SIMD)
#include <emmintrin.h>
#define TF_SSE2 1
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define TF_AVX2 1 /* compiled for AVX2 too, chosen at import when the CPU has it */
#define TF_TARGET_AVX2 __attribute__((target("avx2")))
#endif
#endif

enum { LEVEL_NONE, LEVEL_SSE2, LEVEL_AVX2 };
#ifdef TF_SSE2
static int level = LEVEL_SSE2;
#else
static int level = LEVEL_NONE;
#endif

/* ---------------------------------------------------------------- scalar */

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Horizontal pass of one row of RGBX pixels (src[0] is image column xoff) -> c->n RGBX
 * pixels in dst (X = 0). */
static void horizontal_scalar(const uint8_t *src, int xoff, uint8_t *dst, const Coeffs *c) {
    for (int xx = 0; xx < c->n; xx++) {
        const int taps = c->bounds[2 * xx + 1];
        const uint8_t *p = src + (ptrdiff_t)(c->bounds[2 * xx] - xoff) * PS;
        const int32_t *k = &c->k[(size_t)xx * c->ksize];
        int32_t s0 = HALF, s1 = HALF, s2 = HALF;
        for (int t = 0; t < taps; t++, p += PS) {
            s0 += p[0] * k[t];
            s1 += p[1] * k[t];
            s2 += p[2] * k[t];
        }
        dst[(size_t)xx * PS + 0] = clip8(s0);
        dst[(size_t)xx * PS + 1] = clip8(s1);
        dst[(size_t)xx * PS + 2] = clip8(s2);
        dst[(size_t)xx * PS + 3] = 0;
    }
}

static void vertical_scalar(const uint8_t *src, size_t stride, int first, const Coeffs *c, int yy, uint8_t *dst,
                            int nbytes) {
    const int taps = c->bounds[2 * yy + 1];
    const int32_t *k = &c->k[(size_t)yy * c->ksize];
    src += (size_t)first * stride;
    for (int i = 0; i < nbytes; i++) {
        int32_t acc = HALF;
        for (int t = 0; t < taps; t++) acc += src[(size_t)t * stride + i] * k[t];
        dst[i] = clip8(acc);
    }
}

/* ---------------------------------------------------------------- SSE2 */

#ifdef TF_SSE2
/* horizontal_scalar with pmaddwd. Reads up to 4 bytes past the last pixel used (zero
 * weight). */
static void horizontal_sse2(const uint8_t *src, int xoff, uint8_t *dst, const Coeffs *c) {
    const __m128i zero = _mm_setzero_si128(), half = _mm_set1_epi32(HALF);
    for (int xx = 0; xx < c->n; xx++) {
        const int pairs = (c->bounds[2 * xx + 1] + 1) >> 1;
        const uint8_t *p = src + (ptrdiff_t)(c->bounds[2 * xx] - xoff) * PS;
        const uint32_t *h = &c->hi[QUAD(c, xx, 0)], *l = &c->lo[QUAD(c, xx, 0)];
        __m128i ah = zero, al = zero;
        for (int t = 0; t < pairs; t++) {
            __m128i v = _mm_loadl_epi64((const __m128i *)(p + 8 * t)); /* rgbx rgbx */
            v = _mm_unpacklo_epi8(v, zero);
            v = _mm_unpacklo_epi16(v, _mm_unpackhi_epi64(v, v));     /* rr gg bb xx */
            ah = _mm_add_epi32(ah, _mm_madd_epi16(v, _mm_loadu_si128((const __m128i *)(h + 4 * t))));
            al = _mm_add_epi32(al, _mm_madd_epi16(v, _mm_loadu_si128((const __m128i *)(l + 4 * t))));
        }
        __m128i sum = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(ah, SPLIT), al), half);
        sum = _mm_srai_epi32(sum, PRECISION_BITS);
        sum = _mm_packs_epi32(sum, sum);
        sum = _mm_packus_epi16(sum, sum);
        uint32_t px = (uint32_t)_mm_cvtsi128_si32(sum);
        memcpy(dst + (size_t)xx * PS, &px, PS);
    }
}

/* vertical_scalar 16 bytes at a time. Reads and writes up to 15 bytes past nbytes. */
static void vertical_sse2(const uint8_t *src, size_t stride, int first, const Coeffs *c, int yy, uint8_t *dst,
                          int nbytes) {
    const int taps = c->bounds[2 * yy + 1];
    src += (size_t)first * stride;
    const __m128i zero = _mm_setzero_si128(), half = _mm_set1_epi32(HALF);
    const uint32_t *h = &c->hi[QUAD(c, yy, 0)], *l = &c->lo[QUAD(c, yy, 0)];
    for (int i = 0; i < nbytes; i += 16) {
        __m128i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
        __m128i l0 = zero, l1 = zero, l2 = zero, l3 = zero;
        for (int t = 0; t < taps; t += 2) {
            const uint8_t *r0 = src + (size_t)t * stride + i;
            const uint8_t *r1 = t + 1 < taps ? r0 + stride : r0; /* its weight is 0 */
            __m128i a = _mm_loadu_si128((const __m128i *)r0);
            __m128i b = _mm_loadu_si128((const __m128i *)r1);
            __m128i ablo = _mm_unpacklo_epi8(a, b), abhi = _mm_unpackhi_epi8(a, b);
            __m128i w0 = _mm_unpacklo_epi8(ablo, zero), w1 = _mm_unpackhi_epi8(ablo, zero);
            __m128i w2 = _mm_unpacklo_epi8(abhi, zero), w3 = _mm_unpackhi_epi8(abhi, zero);
            __m128i kh = _mm_loadu_si128((const __m128i *)(h + 2 * t));
            __m128i kl = _mm_loadu_si128((const __m128i *)(l + 2 * t));
            h0 = _mm_add_epi32(h0, _mm_madd_epi16(w0, kh));
            h1 = _mm_add_epi32(h1, _mm_madd_epi16(w1, kh));
            h2 = _mm_add_epi32(h2, _mm_madd_epi16(w2, kh));
            h3 = _mm_add_epi32(h3, _mm_madd_epi16(w3, kh));
            l0 = _mm_add_epi32(l0, _mm_madd_epi16(w0, kl));
            l1 = _mm_add_epi32(l1, _mm_madd_epi16(w1, kl));
            l2 = _mm_add_epi32(l2, _mm_madd_epi16(w2, kl));
            l3 = _mm_add_epi32(l3, _mm_madd_epi16(w3, kl));
        }
#define TF_FINISH(hh, ll) \
    _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hh, SPLIT), ll), half), PRECISION_BITS)
        __m128i s01 = _mm_packs_epi32(TF_FINISH(h0, l0), TF_FINISH(h1, l1));
        __m128i s23 = _mm_packs_epi32(TF_FINISH(h2, l2), TF_FINISH(h3, l3));
#undef TF_FINISH
        _mm_storeu_si128((__m128i *)(dst + i), _mm_packus_epi16(s01, s23));
    }
}
#endif

/* ---------------------------------------------------------------- AVX2 */

#ifdef TF_AVX2
/* clip(sum_j k_j p[j * step + i]) for i < 32, the pairs of taps in h, l: 32 bytes. In-lane
 * unpacks and packs keep the byte order. */
TF_TARGET_AVX2 static inline __m256i sum32_avx2(const uint8_t *p, size_t step, int taps, const uint32_t *h,
                                                const uint32_t *l) {
    const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(HALF);
    __m256i h0 = zero, h1 = zero, h2 = zero, h3 = zero;
    __m256i l0 = zero, l1 = zero, l2 = zero, l3 = zero;
    for (int t = 0; t < taps; t += 2) {
        const uint8_t *r0 = p + (size_t)t * step;
        const uint8_t *r1 = t + 1 < taps ? r0 + step : r0; /* its weight is 0 */
        __m256i a = _mm256_loadu_si256((const __m256i *)r0);
        __m256i b = _mm256_loadu_si256((const __m256i *)r1);
        __m256i ablo = _mm256_unpacklo_epi8(a, b), abhi = _mm256_unpackhi_epi8(a, b);
        __m256i w0 = _mm256_unpacklo_epi8(ablo, zero), w1 = _mm256_unpackhi_epi8(ablo, zero);
        __m256i w2 = _mm256_unpacklo_epi8(abhi, zero), w3 = _mm256_unpackhi_epi8(abhi, zero);
        __m256i kh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(h + 2 * t)));
        __m256i kl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(l + 2 * t)));
        h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(w0, kh));
        h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(w1, kh));
        h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(w2, kh));
        h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(w3, kh));
        l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(w0, kl));
        l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(w1, kl));
        l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(w2, kl));
        l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(w3, kl));
    }
#define TF_FINISH(hh, ll)                                                                         \
    _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hh, SPLIT), ll), half), \
                      PRECISION_BITS)
    __m256i s01 = _mm256_packs_epi32(TF_FINISH(h0, l0), TF_FINISH(h1, l1));
    __m256i s23 = _mm256_packs_epi32(TF_FINISH(h2, l2), TF_FINISH(h3, l3));
#undef TF_FINISH
    return _mm256_packus_epi16(s01, s23);
}

/* vertical_scalar 32 bytes at a time. */
TF_TARGET_AVX2 static void vertical_avx2(const uint8_t *src, size_t stride, int first, const Coeffs *c, int yy,
                                         uint8_t *dst, int nbytes) {
    const int taps = c->bounds[2 * yy + 1];
    const uint32_t *h = &c->hi[QUAD(c, yy, 0)], *l = &c->lo[QUAD(c, yy, 0)];
    src += (size_t)first * stride;
    for (int i = 0; i < nbytes; i += 32)
        _mm256_storeu_si256((__m256i *)(dst + i), sum32_avx2(src + i, stride, taps, h, l));
}

/* 8 x 8 pixels (32-bit): row k of src (src + k * sstride, 8 pixels) becomes column k of
 * dst (pixel k of the rows dst + j * dstride). */
TF_TARGET_AVX2 static inline void transpose8x8(const uint8_t *src, size_t sstride, uint8_t *dst, size_t dstride) {
#define TF_LOAD(k) _mm256_loadu_si256((const __m256i *)(src + (k) * sstride))
    __m256i r0 = TF_LOAD(0), r1 = TF_LOAD(1), r2 = TF_LOAD(2), r3 = TF_LOAD(3);
    __m256i r4 = TF_LOAD(4), r5 = TF_LOAD(5), r6 = TF_LOAD(6), r7 = TF_LOAD(7);
#undef TF_LOAD
    __m256i t0 = _mm256_unpacklo_epi32(r0, r1), t1 = _mm256_unpackhi_epi32(r0, r1);
    __m256i t2 = _mm256_unpacklo_epi32(r2, r3), t3 = _mm256_unpackhi_epi32(r2, r3);
    __m256i t4 = _mm256_unpacklo_epi32(r4, r5), t5 = _mm256_unpackhi_epi32(r4, r5);
    __m256i t6 = _mm256_unpacklo_epi32(r6, r7), t7 = _mm256_unpackhi_epi32(r6, r7);
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
#define TF_STORE(k, v) _mm256_storeu_si256((__m256i *)(dst + (k) * dstride), v)
    TF_STORE(0, _mm256_permute2x128_si256(u0, u4, 0x20));
    TF_STORE(1, _mm256_permute2x128_si256(u1, u5, 0x20));
    TF_STORE(2, _mm256_permute2x128_si256(u2, u6, 0x20));
    TF_STORE(3, _mm256_permute2x128_si256(u3, u7, 0x20));
    TF_STORE(4, _mm256_permute2x128_si256(u0, u4, 0x31));
    TF_STORE(5, _mm256_permute2x128_si256(u1, u5, 0x31));
    TF_STORE(6, _mm256_permute2x128_si256(u2, u6, 0x31));
    TF_STORE(7, _mm256_permute2x128_si256(u3, u7, 0x31));
#undef TF_STORE
}

/* The horizontal pass of 8 rows at once (arguments as tf_horizontal_rows): image columns
 * [lo, lo + cols) are transposed into T (one 32-byte register per column: the 8 rows),
 * every output pixel is then a sum of whole columns like a vertical pass, and O is
 * transposed back. Reads and writes up to 7 pixels past the last column and output pixel. */
TF_TARGET_AVX2 static void hblock_avx2(const uint8_t *rows, size_t rstride, int xoff, int lo, int cols,
                                       const Coeffs *c, uint8_t *T, uint8_t *O, uint8_t *dst, size_t dstride) {
    const uint8_t *src = rows + (size_t)(lo - xoff) * PS;
    for (int x = 0; x < cols; x += 8) transpose8x8(src + (size_t)x * PS, rstride, T + (size_t)x * 32, 32);
    for (int xx = 0; xx < c->n; xx++) {
        const uint8_t *p = T + (size_t)(c->bounds[2 * xx] - lo) * 32;
        _mm256_storeu_si256((__m256i *)(O + (size_t)xx * 32),
                            sum32_avx2(p, 32, c->bounds[2 * xx + 1], &c->hi[QUAD(c, xx, 0)], &c->lo[QUAD(c, xx, 0)]));
    }
    for (int xx = 0; xx < c->n; xx += 8) transpose8x8(O + (size_t)xx * 32, 32, dst + (size_t)xx * PS, dstride);
}

TF_TARGET_AVX2 static int planes_avx2(const uint8_t *rgbx, int w, int flip, uint8_t *r, uint8_t *g, uint8_t *b) {
    const __m256i gather = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m256i mirror = _mm256_setr_epi8(12, 8, 4, 0, 13, 9, 5, 1, 14, 10, 6, 2, 15, 11, 7, 3,
                                            12, 8, 4, 0, 13, 9, 5, 1, 14, 10, 6, 2, 15, 11, 7, 3);
    const __m256i order = flip ? _mm256_setr_epi32(4, 0, 5, 1, 6, 2, 7, 3) : _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const int n = w & ~7;
    for (int x = 0; x < n; x += 8) { /* output pixels x..x+7 */
        const uint8_t *p = rgbx + (size_t)(flip ? w - 8 - x : x) * PS;
        __m256i v = _mm256_loadu_si256((const __m256i *)p);
        v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, flip ? mirror : gather), order);
        const __m128i rg = _mm256_castsi256_si128(v), bx = _mm256_extracti128_si256(v, 1);
        _mm_storel_epi64((__m128i *)(r + x), rg);
        _mm_storel_epi64((__m128i *)(g + x), _mm_unpackhi_epi64(rg, rg));
        _mm_storel_epi64((__m128i *)(b + x), bx);
    }
    return n;
}
#endif

/* ---------------------------------------------------------------- dispatch */

void tf_horizontal_rows(const uint8_t *rows, size_t rstride, int nrows, int xoff, int lo, int cols, const Coeffs *c,
                        uint8_t *T, uint8_t *O, uint8_t *dst, size_t dstride) {
#ifdef TF_AVX2
    if (level == LEVEL_AVX2) {
        hblock_avx2(rows, rstride, xoff, lo, cols, c, T, O, dst, dstride);
        return;
    }
#endif
    (void)lo, (void)cols, (void)T, (void)O;
    for (int r = 0; r < nrows; r++) {
#ifdef TF_SSE2
        if (level == LEVEL_SSE2) {
            horizontal_sse2(rows + (size_t)r * rstride, xoff, dst + (size_t)r * dstride, c);
            continue;
        }
#endif
        horizontal_scalar(rows + (size_t)r * rstride, xoff, dst + (size_t)r * dstride, c);
    }
}

void tf_vertical(const uint8_t *src, size_t stride, int first, const Coeffs *c, int yy, uint8_t *dst, int nbytes) {
#ifdef TF_AVX2
    if (level == LEVEL_AVX2) {
        vertical_avx2(src, stride, first, c, yy, dst, nbytes);
        return;
    }
#endif
#ifdef TF_SSE2
    if (level == LEVEL_SSE2) {
        vertical_sse2(src, stride, first, c, yy, dst, nbytes);
        return;
    }
#endif
    vertical_scalar(src, stride, first, c, yy, dst, nbytes);
}

int tf_planes(const uint8_t *rgbx, int w, int flip, uint8_t *r, uint8_t *g, uint8_t *b) {
#ifdef TF_AVX2
    if (level == LEVEL_AVX2) return planes_avx2(rgbx, w, flip, r, g, b);
#endif
    (void)rgbx, (void)w, (void)flip, (void)r, (void)g, (void)b;
    return 0;
}

const char *tf_simd_level(void) { return level == LEVEL_AVX2 ? "avx2" : level == LEVEL_SSE2 ? "sse2" : "none"; }

static int cpu_has_avx2(void) {
#ifdef TF_AVX2
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

int tf_simd_select(const char *name) {
    int want;
    if (strcmp(name, "best") == 0) {
#ifdef TF_SSE2
        want = cpu_has_avx2() ? LEVEL_AVX2 : LEVEL_SSE2;
#else
        want = LEVEL_NONE;
#endif
    } else if (strcmp(name, "avx2") == 0) {
        if (!cpu_has_avx2()) return -1;
        want = LEVEL_AVX2;
    } else if (strcmp(name, "sse2") == 0) {
#ifndef TF_SSE2
        return -1;
#endif
        want = LEVEL_SSE2;
    } else if (strcmp(name, "none") == 0) {
        want = LEVEL_NONE;
    } else {
        return -1;
    }
    level = want;
    return 0;
}
