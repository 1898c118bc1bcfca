/* turbofeed.decode._crop: JPEG bytes -> only the crop window decoded -> antialiased
 * bilinear resize -> written straight into a caller's buffer, in one call without the GIL.
 *
 * The resize reproduces Pillow's ImagingResample (src/libImaging/Resample.c) for
 * BILINEAR with a box: the same coefficients (computed in double from a float box,
 * normalised, rounded to 22-bit fixed point), two separable passes with the result of
 * the first rounded to uint8, in Pillow's order (Pillow 13 runs the vertical pass first
 * when the height shrinks more than twice as much as the width). With the same decoded
 * pixels the result is bit-identical to
 * Image.fromarray(pixels).resize((w, h), Image.BILINEAR, box=box).
 *
 * Exact and fast: on x86-64 the passes use SSE2 pmaddwd on 16-bit numbers. Each 22-bit
 * coefficient k is split as k = hi * 2048 + lo (hi, lo < 2^11 + 1); both partial sums
 * are exact in 32 bits and sum_j p_j k_j = 2048 * sum_j p_j hi_j + sum_j p_j lo_j is the
 * same integer Pillow computes. Pixels are decoded as RGBX (4 bytes), so one 128-bit
 * register holds two pixels' channels as (pixel j, pixel j+1) pairs.
 *
 * Only what the filter reads is decoded: the columns through jpeg_crop_scanline (it
 * aligns the left edge to an iMCU; MARGIN extra columns keep the chroma upsampling of
 * the used columns identical to a full decode), the rows above through
 * jpeg_skip_scanlines, and decoding stops after the last row read
 * (jpeg_abort_decompress). With dct_scale, libjpeg-turbo's exact 1/2 IDCT scaling is
 * used when the box is at least twice the output in both axes (then the result equals
 * Pillow's resize of the half-size decode, not of the full one).
 *
 * Errors: libjpeg errors and warnings about corrupt data raise ValueError with
 * libjpeg's message (strict, like simplejpeg's strict=True). Streams this module does
 * not handle (CMYK/YCCK, or bytes that do not end with an EOI marker, which may be
 * truncated in the part that is never decoded here) raise NotImplementedError, so the
 * caller can use its general decoder, which then decides. An image declaring more
 * pixels than the caller's max_pixels raises turbofeed.errors.ImageTooLarge (a
 * ValueError) from its header, before anything its size is allocated or decoded.
 *
 * Pixels already decoded (uint8 arrays of 1, 3 or 4 channels) go through the same
 * resampler (resize()): the rows come from a Source, a JPEG being decoded or an array.
 *
 * Scratch memory (the libjpeg object and the buffers) is kept per thread and freed
 * when the thread exits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#ifndef _WIN32
#include <pthread.h>
#endif

#if (defined(__SSE2__) || defined(_M_X64)) && !defined(TF_NO_SIMD)
#include <emmintrin.h>
#define TF_SSE2 1
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define TF_AVX2 1 /* compiled for AVX2 too, chosen at import when the CPU has it */
#define TF_TARGET_AVX2 __attribute__((target("avx2")))
#endif
#endif

#define PRECISION_BITS 22 /* Pillow's 8-bit resampling precision */
#define HALF (1 << (PRECISION_BITS - 1))
#define SPLIT 11          /* k = hi << SPLIT | lo */
#define PS 4              /* bytes per decoded pixel (JCS_EXT_RGBX) */
#define BATCH 16          /* scanlines asked from libjpeg per call */
#define MARGIN 2          /* extra columns decoded each side (see above) */
#define SLACK 64          /* bytes after every buffer: the SIMD loops read/write past the end */
#define VEC 32            /* the vertical pass reads and writes up to VEC - 1 bytes past a row */
#define KEEP_BYTES ((size_t)32 << 20) /* scratch larger than this is freed after a call */

enum { RC_OK = 0, RC_JPEG, RC_FALLBACK, RC_NOMEM, RC_VALUE, RC_TOO_LARGE };

static PyObject *image_too_large; /* turbofeed.errors.ImageTooLarge, imported at init */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} ErrorManager;

/* Resampling coefficients of one direction. */
typedef struct {
    int n;          /* output pixels */
    int ksize;      /* stride of k (Pillow's maximum taps) */
    int kpairs;     /* pairs of taps at most: stride of hi, lo, hi2, lo2 */
    int *bounds;    /* (first input pixel, taps) per output pixel; taps may be 0 */
    int32_t *k;     /* Pillow's fixed-point coefficients */
    /* Pairs of taps (hi_2t | hi_2t+1 << 16) for pmaddwd, an odd count padded with 0, each
     * repeated 4 times (one 128-bit register), output pixels 2j and 2j+1 side by side (one
     * 256-bit register for the AVX2 horizontal pass): pair t of output pixel x is at
     * QUAD(x, t), 4 x uint32. Zeros after the last pair of a pixel. */
    uint32_t *hi;
    uint32_t *lo;
} Coeffs;

#define QUAD(c, x, t) ((((size_t)(x) >> 1) * (size_t)(c)->kpairs + (size_t)(t)) * 8 + ((x) & 1) * 4)

typedef struct {
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    int created;
    char msg[JMSG_LENGTH_MAX + 96];
    unsigned long long size[2];             /* height, width of an image over the limit */
    unsigned char *rows; size_t rows_cap;   /* decoded scanlines */
    unsigned char *tmp; size_t tmp_cap;     /* result of the first pass, then one output row */
    unsigned char *coef; size_t coef_cap;   /* both Coeffs' arrays */
    double *w; size_t w_cap;                /* one pixel's double coefficients */
} State;

/* ---------------------------------------------------------------- errors */

static void on_error_exit(j_common_ptr c) {
    State *s = (State *)c->client_data;
    (*c->err->format_message)(c, s->msg);
    longjmp(s->err.jump, 1);
}

static void on_emit_message(j_common_ptr c, int level) {
    if (level < 0) { /* a warning: corrupt data. Strict: an error. */
        on_error_exit(c);
    }
}

static void on_output_message(j_common_ptr c) { (void)c; }

/* ---------------------------------------------------------------- per-thread state */

static int grow(void **p, size_t *cap, size_t need) {
    need += SLACK;
    if (need <= *cap) return 1;
    void *q = malloc(need);
    if (!q) return 0;
    free(*p);
    *p = q;
    *cap = need;
    return 1;
}

static void shrink(void **p, size_t *cap) {
    if (*cap > KEEP_BYTES) {
        free(*p);
        *p = NULL;
        *cap = 0;
    }
}

static void state_free(void *arg) {
    State *s = (State *)arg;
    if (!s) return;
    if (s->created) jpeg_destroy_decompress(&s->cinfo);
    free(s->rows); free(s->tmp); free(s->coef); free(s->w);
    free(s);
}

static int create(State *s) {
    if (setjmp(s->err.jump)) return 0; /* jpeg_create_decompress fails only without memory */
    jpeg_create_decompress(&s->cinfo);
    s->created = 1;
    return 1;
}

static State *state_new(void) {
    State *s = (State *)calloc(1, sizeof(State));
    if (!s) return NULL;
    s->cinfo.err = jpeg_std_error(&s->err.pub);
    s->err.pub.error_exit = on_error_exit;
    s->err.pub.emit_message = on_emit_message;
    s->err.pub.output_message = on_output_message;
    s->cinfo.client_data = s; /* jpeg_create_decompress keeps err and client_data */
    if (!create(s)) {
        free(s);
        return NULL;
    }
    return s;
}

#ifndef _WIN32
static pthread_key_t state_key;
static int state_key_ok = 0;

static State *state_get(void) {
    State *s = (State *)pthread_getspecific(state_key);
    if (!s) {
        s = state_new();
        if (s && pthread_setspecific(state_key, s) != 0) {
            state_free(s);
            s = NULL;
        }
    }
    return s;
}
static void state_put(State *s) { (void)s; }
#else
static State *state_get(void) { return state_new(); }
static void state_put(State *s) { state_free(s); }
#endif

static void state_trim(State *s) {
    shrink((void **)&s->rows, &s->rows_cap);
    shrink((void **)&s->tmp, &s->tmp_cap);
    shrink((void **)&s->coef, &s->coef_cap);
}

/* ---------------------------------------------------------------- coefficients (Pillow) */

static inline double bilinear_filter(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

static int ksize_of(float in0, float in1, int out_size) {
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    return (int)ceil(1.0 * filterscale) * 2 + 1;
}

static size_t coeffs_bytes(int n, int ksize) {
    size_t kpairs = (size_t)ksize / 2 + 1;
    size_t bytes = (size_t)n * (2 * sizeof(int) + ksize * sizeof(int32_t)) +
                   ((size_t)n + 1) / 2 * 2 * 16 * kpairs * sizeof(uint32_t);
    return (bytes + 63) & ~(size_t)63; /* keeps the next block aligned */
}

/* Lay out a Coeffs in mem (coeffs_bytes(n, ksize) bytes, suitably aligned). */
static void coeffs_place(Coeffs *c, unsigned char *mem, int n, int ksize) {
    c->n = n;
    c->ksize = ksize;
    c->kpairs = ksize / 2 + 1;
    const size_t quads = ((size_t)n + 1) / 2 * 2 * c->kpairs * 4;
    c->hi = (uint32_t *)mem;
    c->lo = c->hi + quads;
    c->k = (int32_t *)(c->lo + quads);
    c->bounds = (int *)(c->k + (size_t)n * ksize);
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for the triangle filter, then the
 * zero taps at both ends dropped (they add nothing), so only pixels that count are
 * decoded, and the hi/lo pairs made. */
static void coeffs_fill(Coeffs *c, int in_size, float in0, float in1, double *w) {
    const int out_size = c->n, ksize = c->ksize;
    double scale = (double)(in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    double ss = 1.0 / filterscale;
    const size_t quads = ((size_t)out_size + 1) / 2 * 2 * c->kpairs * 4;
    memset(c->hi, 0, quads * sizeof(uint32_t));
    memset(c->lo, 0, quads * sizeof(uint32_t));
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        int32_t *k = &c->k[(size_t)xx * ksize];
        for (int x = 0; x < xmax; x++) {
            double v = bilinear_filter((x + xmin - center + 0.5) * ss);
            w[x] = v;
            ww += v;
        }
        for (int x = 0; x < xmax; x++) {
            if (ww != 0.0) w[x] /= ww;
        }
        for (int x = 0; x < xmax; x++) {
            k[x] = w[x] < 0 ? (int32_t)(-0.5 + w[x] * (1 << PRECISION_BITS))
                            : (int32_t)(0.5 + w[x] * (1 << PRECISION_BITS));
        }
        int lo = 0, hi = xmax > 0 ? xmax : 0;
        while (lo < hi && k[lo] == 0) lo++;
        while (hi > lo && k[hi - 1] == 0) hi--;
        if (lo > 0) memmove(k, k + lo, (size_t)(hi - lo) * sizeof(int32_t));
        const int taps = hi - lo;
        c->bounds[2 * xx] = taps > 0 ? xmin + lo : 0;
        c->bounds[2 * xx + 1] = taps;
        for (int t = 0; t < taps; t += 2) {
            int32_t k0 = k[t], k1 = t + 1 < taps ? k[t + 1] : 0;
            /* arithmetic shift: also right for negative k (not produced by this filter) */
            uint16_t h0 = (uint16_t)(k0 >> SPLIT), h1 = (uint16_t)(k1 >> SPLIT);
            uint16_t l0 = (uint16_t)(k0 & ((1 << SPLIT) - 1)), l1 = (uint16_t)(k1 & ((1 << SPLIT) - 1));
            for (int r = 0; r < 4; r++) {
                c->hi[QUAD(c, xx, t / 2) + r] = (uint32_t)h0 | (uint32_t)h1 << 16;
                c->lo[QUAD(c, xx, t / 2) + r] = (uint32_t)l0 | (uint32_t)l1 << 16;
            }
        }
    }
}

/* [lo, hi) of the input pixels any output pixel reads; (0, 1) when none does. Output
 * pixels without taps get lo as first pixel, so the SIMD loops read inside the rows. */
static void coeffs_span(Coeffs *c, int *lo, int *hi) {
    int a = INT32_MAX, b = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->bounds[2 * i + 1] <= 0) continue;
        if (c->bounds[2 * i] < a) a = c->bounds[2 * i];
        if (c->bounds[2 * i] + c->bounds[2 * i + 1] > b) b = c->bounds[2 * i] + c->bounds[2 * i + 1];
    }
    if (a == INT32_MAX) a = 0, b = 1;
    for (int i = 0; i < c->n; i++)
        if (c->bounds[2 * i + 1] <= 0) c->bounds[2 * i] = a;
    *lo = a;
    *hi = b;
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* ---------------------------------------------------------------- the two passes */

/* Horizontal pass of one row of RGBX pixels (src[0] is image column xoff) -> c->n RGBX
 * pixels in dst. Reads up to 4 bytes past the last pixel used (zero weight). */
static void pass_horizontal(const uint8_t *src, int xoff, uint8_t *dst, const Coeffs *c) {
#ifdef TF_SSE2
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
            ah = _mm_add_epi32(ah, _mm_madd_epi16(v, _mm_loadu_si128((const __m128i *)(h + 8 * t))));
            al = _mm_add_epi32(al, _mm_madd_epi16(v, _mm_loadu_si128((const __m128i *)(l + 8 * t))));
        }
        __m128i sum = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(ah, SPLIT), al), half);
        sum = _mm_srai_epi32(sum, PRECISION_BITS);
        sum = _mm_packs_epi32(sum, sum);
        sum = _mm_packus_epi16(sum, sum);
        uint32_t px = (uint32_t)_mm_cvtsi128_si32(sum);
        memcpy(dst + (size_t)xx * PS, &px, PS);
    }
#else
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
#endif
}

/* Vertical pass for output row yy: dst[i] = clip(sum_j k_j src[(first + j) * stride + i])
 * for i < nbytes. Reads and writes up to 15 bytes past nbytes. */
static void pass_vertical(const uint8_t *src, size_t stride, int first, const Coeffs *c, int yy,
                          uint8_t *dst, int nbytes) {
    const int taps = c->bounds[2 * yy + 1];
    src += (size_t)first * stride;
#ifdef TF_SSE2
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
            __m128i kh = _mm_loadu_si128((const __m128i *)(h + 4 * t));
            __m128i kl = _mm_loadu_si128((const __m128i *)(l + 4 * t));
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
#else
    const int32_t *k = &c->k[(size_t)yy * c->ksize];
    for (int i = 0; i < nbytes; i++) {
        int32_t acc = HALF;
        for (int t = 0; t < taps; t++) acc += src[(size_t)t * stride + i] * k[t];
        dst[i] = clip8(acc);
    }
#endif
}

#ifdef TF_AVX2
/* pass_horizontal with two output pixels per 256-bit register (one per 128-bit lane).
 * Both run for the larger pair count of the two; the other's extra coefficients are 0. */
TF_TARGET_AVX2 static void pass_horizontal_avx2(const uint8_t *src, int xoff, uint8_t *dst,
                                                const Coeffs *c) {
    const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(HALF);
    const __m256i pick = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
    for (int x0 = 0; x0 < c->n; x0 += 2) {
        const int x1 = x0 + 1 < c->n ? x0 + 1 : x0; /* odd n: a phantom with zero weights */
        const int n0 = (c->bounds[2 * x0 + 1] + 1) >> 1, n1 = (c->bounds[2 * x1 + 1] + 1) >> 1;
        const int pairs = n0 > n1 ? n0 : n1;
        const uint8_t *p0 = src + (ptrdiff_t)(c->bounds[2 * x0] - xoff) * PS;
        const uint8_t *p1 = src + (ptrdiff_t)(c->bounds[2 * x1] - xoff) * PS;
        const uint32_t *h = &c->hi[QUAD(c, x0, 0)], *l = &c->lo[QUAD(c, x0, 0)];
        __m256i ah = zero, al = zero;
        for (int t = 0; t < pairs; t++) {
            __m256i v = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(p0 + 8 * t))),
                _mm_loadl_epi64((const __m128i *)(p1 + 8 * t)), 1);
            v = _mm256_unpacklo_epi8(v, zero);
            v = _mm256_unpacklo_epi16(v, _mm256_unpackhi_epi64(v, v));
            ah = _mm256_add_epi32(ah, _mm256_madd_epi16(v, _mm256_loadu_si256((const __m256i *)(h + 8 * t))));
            al = _mm256_add_epi32(al, _mm256_madd_epi16(v, _mm256_loadu_si256((const __m256i *)(l + 8 * t))));
        }
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(ah, SPLIT), al), half);
        sum = _mm256_srai_epi32(sum, PRECISION_BITS);
        sum = _mm256_packs_epi32(sum, sum);
        sum = _mm256_packus_epi16(sum, sum);
        sum = _mm256_permutevar8x32_epi32(sum, pick); /* pixel x0, pixel x1 */
        _mm_storel_epi64((__m128i *)(dst + (size_t)x0 * PS), _mm256_castsi256_si128(sum));
    }
}

/* clip(sum_j k_j p[j * step + i]) for i < 32, the pairs of taps in h, l: 32 bytes. In-lane
 * unpacks and packs keep the byte order. */
TF_TARGET_AVX2 static inline __m256i sum32_avx2(const uint8_t *p, size_t step, int taps,
                                                const uint32_t *h, const uint32_t *l) {
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
        __m256i kh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(h + 4 * t)));
        __m256i kl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(l + 4 * t)));
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

/* pass_vertical, 32 bytes at a time. */
TF_TARGET_AVX2 static void pass_vertical_avx2(const uint8_t *src, size_t stride, int first,
                                              const Coeffs *c, int yy, uint8_t *dst, int nbytes) {
    const int taps = c->bounds[2 * yy + 1];
    const uint32_t *h = &c->hi[QUAD(c, yy, 0)], *l = &c->lo[QUAD(c, yy, 0)];
    src += (size_t)first * stride;
    for (int i = 0; i < nbytes; i += 32)
        _mm256_storeu_si256((__m256i *)(dst + i), sum32_avx2(src + i, stride, taps, h, l));
}

/* 8 x 8 pixels (32-bit): row k of src (src + k * sstride, 8 pixels) becomes column k of
 * dst (pixel k of the rows dst + j * dstride). */
TF_TARGET_AVX2 static inline void transpose8x8(const uint8_t *src, size_t sstride, uint8_t *dst,
                                               size_t dstride) {
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

/* The horizontal pass of 8 rows at once (row k at rows + k * rstride, its pixel 0 being
 * image column xoff; dst row k at dst + k * dstride): image columns [lo, lo + cols) are
 * transposed into T (one 32-byte register per column: the 8 rows), every output pixel is
 * then a sum of whole columns like a vertical pass, and O is transposed back. Rows past
 * the valid ones give junk that nobody reads. Reads and writes up to 7 pixels past the
 * last column and output pixel. */
TF_TARGET_AVX2 static void hblock_avx2(const uint8_t *rows, size_t rstride, int xoff, int lo,
                                       int cols, const Coeffs *c, uint8_t *T, uint8_t *O,
                                       uint8_t *dst, size_t dstride) {
    const uint8_t *src = rows + (size_t)(lo - xoff) * PS;
    for (int x = 0; x < cols; x += 8) transpose8x8(src + (size_t)x * PS, rstride, T + (size_t)x * 32, 32);
    for (int xx = 0; xx < c->n; xx++) {
        const uint8_t *p = T + (size_t)(c->bounds[2 * xx] - lo) * 32;
        _mm256_storeu_si256((__m256i *)(O + (size_t)xx * 32),
                            sum32_avx2(p, 32, c->bounds[2 * xx + 1], &c->hi[QUAD(c, xx, 0)],
                                       &c->lo[QUAD(c, xx, 0)]));
    }
    for (int xx = 0; xx < c->n; xx += 8) transpose8x8(O + (size_t)xx * 32, 32, dst + (size_t)xx * PS, dstride);
}
#endif

#ifdef TF_AVX2
/* RGBX pixels -> the R, G and B planes, 8 pixels at a time (mirrored when flip); returns
 * how many output pixels from the left it wrote (a multiple of 8): the caller does the rest. */
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

typedef void (*HorizontalPass)(const uint8_t *, int, uint8_t *, const Coeffs *);
typedef void (*VerticalPass)(const uint8_t *, size_t, int, const Coeffs *, int, uint8_t *, int);
static HorizontalPass horizontal = pass_horizontal;
static VerticalPass vertical = pass_vertical;
static int use_block = 0; /* horizontal pass 8 rows at a time (hblock_avx2) */

/* "avx2", "sse2" or "none": the kernels to use (all give the same bytes). */
static const char *simd_level(void) {
#ifdef TF_AVX2
    if (horizontal == pass_horizontal_avx2) return "avx2";
#endif
#ifdef TF_SSE2
    return "sse2";
#else
    return "none";
#endif
}

static int simd_select(const char *level) {
    if (strcmp(level, "best") == 0) {
#ifdef TF_AVX2
        __builtin_cpu_init();
        level = __builtin_cpu_supports("avx2") ? "avx2" : "sse2";
#else
        level = simd_level();
#endif
    }
#ifdef TF_AVX2
    if (strcmp(level, "avx2") == 0) {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("avx2")) return -1;
        horizontal = pass_horizontal_avx2;
        vertical = pass_vertical_avx2;
        use_block = 1;
        return 0;
    }
#endif
    if (strcmp(level, "sse2") == 0 || strcmp(level, "none") == 0) {
#ifdef TF_SSE2
        if (strcmp(level, "none") == 0) return -1;
#else
        if (strcmp(level, "sse2") == 0) return -1;
#endif
        horizontal = pass_horizontal;
        vertical = pass_vertical;
        use_block = 0;
        return 0;
    }
    return -1;
}

static size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* The horizontal pass of nrows <= 8 rows (see hblock_avx2 for the arguments). */
static void horizontal_rows(const uint8_t *rows, size_t rstride, int nrows, int xoff, int lo, int cols,
                            const Coeffs *c, uint8_t *T, uint8_t *O, uint8_t *dst, size_t dstride) {
#ifdef TF_AVX2
    if (use_block) {
        hblock_avx2(rows, rstride, xoff, lo, cols, c, T, O, dst, dstride);
        return;
    }
#endif
    (void)lo, (void)cols, (void)T, (void)O;
    for (int r = 0; r < nrows; r++) horizontal(rows + (size_t)r * rstride, xoff, dst + (size_t)r * dstride, c);
}

typedef struct {
    void *out;
    int out_h, out_w, flip, chw;
    const float *offset, *factor; /* NULL: uint8 output */
} Target;

/* Write output row yy from out_w RGBX pixels: layout, flip, dtype. */
static void store_row(const Target *t, int yy, const uint8_t *rgbx) {
    const int w = t->out_w, h = t->out_h;
    if (t->offset == NULL) {
        uint8_t *o = (uint8_t *)t->out;
        if (t->chw) {
            uint8_t *r = o + (size_t)yy * w, *g = r + (size_t)h * w, *b = g + (size_t)h * w;
            int done = 0;
#ifdef TF_AVX2
            if (use_block) done = planes_avx2(rgbx, w, t->flip, r, g, b);
#endif
            if (t->flip) {
                for (int x = done; x < w; x++) {
                    const uint8_t *p = rgbx + (size_t)(w - 1 - x) * PS;
                    r[x] = p[0]; g[x] = p[1]; b[x] = p[2];
                }
            } else {
                for (int x = done; x < w; x++) {
                    const uint8_t *p = rgbx + (size_t)x * PS;
                    r[x] = p[0]; g[x] = p[1]; b[x] = p[2];
                }
            }
        } else {
            uint8_t *d = o + (size_t)yy * w * 3;
            for (int x = 0; x < w; x++) {
                const uint8_t *p = rgbx + (size_t)(t->flip ? w - 1 - x : x) * PS;
                d[3 * x] = p[0]; d[3 * x + 1] = p[1]; d[3 * x + 2] = p[2];
            }
        }
        return;
    }
    /* (pixel - offset) * factor in float32, as numpy computes it in write_slot */
    float *o = (float *)t->out;
    for (int c = 0; c < 3; c++) {
        const float off = t->offset[c], fac = t->factor[c];
        for (int x = 0; x < w; x++) {
            float v = ((float)rgbx[(size_t)(t->flip ? w - 1 - x : x) * PS + c] - off) * fac;
            if (t->chw) o[((size_t)c * h + yy) * w + x] = v;
            else o[((size_t)yy * w + x) * 3 + c] = v;
        }
    }
}

/* ---------------------------------------------------------------- rows -> resize */

/* Where the resampler gets its rows: a JPEG being decoded, or an array of pixels. Rows
 * come as RGBX (PS bytes per pixel) and cover the columns [xoff, xoff + width) that
 * crop() chose around the columns the filter reads. */
typedef struct Source Source;
struct Source {
    int (*crop)(Source *src, int lo, int hi, int *xoff, int *width);
    int (*skip)(Source *src, int rows);                 /* drop the rows above the first read */
    int (*read)(Source *src, unsigned char **rows, int n); /* the next n rows */
    State *s;                                            /* for messages */
};

/* Refuse an image of more than max_pixels pixels (0: no limit) from its header size,
 * before anything proportional to it is allocated or decoded: a 2 KB JPEG can declare
 * 60000 x 60000 pixels (10 GB to decode; a progressive one allocates that much in
 * jpeg_start_decompress). The caller raises ImageTooLarge from s->size. */
static int check_size(State *s, unsigned long long h, unsigned long long w, long long max_pixels) {
    if (max_pixels <= 0 || h * w <= (unsigned long long)max_pixels) return RC_OK; /* h, w < 2^32 */
    s->size[0] = h;
    s->size[1] = w;
    return RC_TOO_LARGE;
}

/* Clamp the box to a W x H image (as turbofeed.transforms.resample does). */
static int clamp_box(State *s, const double box[4], double W, double H, double out[4]) {
    out[0] = box[0] > 0 ? box[0] : 0.0;
    out[1] = box[1] > 0 ? box[1] : 0.0;
    out[2] = box[2] < W ? box[2] : W;
    out[3] = box[3] < H ? box[3] : H;
    if (!(out[2] > out[0]) || !(out[3] > out[1])) {
        snprintf(s->msg, sizeof s->msg, "box (%g, %g, %g, %g) is empty or outside the %dx%d image", box[0],
                 box[1], box[2], box[3], (int)W, (int)H);
        return RC_VALUE;
    }
    return RC_OK;
}

/* Resize the box (fx0, fy0, fx1, fy1) of an IW x IH image, its rows read from src, into
 * the target. Reads only the rows and columns the filter needs, top to bottom, once. */
static int resample(State *s, Source *src, int IW, int IH, float fx0, float fy0, float fx1, float fy1,
                    const Target *t) {
    const int out_w = t->out_w, out_h = t->out_h;
    /* Pillow 13's order (ImagingResampleInner): vertical first when the height shrinks
     * more than twice as much as the width, in pixels of the whole image. The rounding
     * between the passes makes the order visible. */
    const int horizontal_first = !((IH - out_h) > 0 && (IH - out_h) > (IW - out_w) * 2);

    /* Coefficients of both directions, in one buffer. */
    Coeffs ch, cv;
    const int ksh = ksize_of(fx0, fx1, out_w), ksv = ksize_of(fy0, fy1, out_h);
    const size_t bh = coeffs_bytes(out_w, ksh), bv = coeffs_bytes(out_h, ksv);
    if (!grow((void **)&s->coef, &s->coef_cap, bh + bv) ||
        !grow((void **)&s->w, &s->w_cap, (size_t)(ksh > ksv ? ksh : ksv) * sizeof(double))) {
        snprintf(s->msg, sizeof s->msg, "out of memory");
        return RC_NOMEM;
    }
    coeffs_place(&ch, s->coef, out_w, ksh);
    coeffs_place(&cv, s->coef + bh, out_h, ksv);
    coeffs_fill(&ch, IW, fx0, fx1, s->w);
    coeffs_fill(&cv, IH, fy0, fy1, s->w);
    int cx_lo, cx_hi, ry_lo, ry_hi;
    coeffs_span(&ch, &cx_lo, &cx_hi);
    coeffs_span(&cv, &ry_lo, &ry_hi);
    const int rows = ry_hi - ry_lo, cols = cx_hi - cx_lo;

    int xoff = 0, width = IW, rc;
    if ((rc = src->crop(src, cx_lo, cx_hi, &xoff, &width)) != RC_OK) return rc;
    if (xoff > cx_lo || xoff + width < cx_hi) { /* cannot happen */
        snprintf(s->msg, sizeof s->msg, "internal error: crop [%d, %d) misses [%d, %d)", xoff, xoff + width,
                 cx_lo, cx_hi);
        return RC_VALUE;
    }
    const size_t stride = (size_t)width * PS;
    /* Horizontal first: 8 rows at a time, resampled at once into mid (rows x out_w).
     * Vertical first: all rows kept, then 8 output rows at a time through mid (8 x cols).
     * Row strides are rounded up to 8 pixels (the block kernels write whole 8-pixel
     * groups); the horizontal pass may read (kpairs * 2 + 1) pixels past the last one it
     * uses (zero weights), the vertical pass VEC - 1 bytes past a row. */
    const size_t over = (size_t)(ch.kpairs * 2 + 2) * PS + VEC;
    const size_t ostride = round8((size_t)out_w) * PS;
    const size_t mstride = horizontal_first ? ostride : round8((size_t)cols) * PS;
    const size_t mid_bytes = (horizontal_first ? round8((size_t)rows) : 8) * mstride + over;
    const size_t lines_bytes = 8 * ostride + VEC;
    const size_t T_bytes = (round8((size_t)cols) + 8) * 32, O_bytes = round8((size_t)out_w) * 32;
    if (!grow((void **)&s->rows, &s->rows_cap, stride * (horizontal_first ? 8 : (size_t)rows) + over) ||
        !grow((void **)&s->tmp, &s->tmp_cap, mid_bytes + lines_bytes + T_bytes + O_bytes)) {
        snprintf(s->msg, sizeof s->msg, "out of memory");
        return RC_NOMEM;
    }
    uint8_t *mid = s->tmp, *lines = mid + mid_bytes, *T = lines + lines_bytes, *O = T + T_bytes;
    if (ry_lo > 0 && (rc = src->skip(src, ry_lo)) != RC_OK) return rc;
    unsigned char *ptrs[BATCH];
    for (int y = ry_lo; y < ry_hi;) {
        const int n = horizontal_first ? (ry_hi - y < 8 ? ry_hi - y : 8) : (ry_hi - y < BATCH ? ry_hi - y : BATCH);
        uint8_t *first = s->rows + (horizontal_first ? 0 : stride * (size_t)(y - ry_lo));
        for (int i = 0; i < n; i++) ptrs[i] = first + stride * (size_t)i;
        if ((rc = src->read(src, ptrs, n)) != RC_OK) return rc;
#ifndef TF_NO_RESIZE
        if (horizontal_first)
            horizontal_rows(s->rows, stride, n, xoff, cx_lo, cols, &ch, T, O, mid + (size_t)(y - ry_lo) * mstride,
                            mstride);
#endif
        y += n;
    }
#ifdef TF_NO_RESIZE
    return RC_OK;
#endif

    if (horizontal_first) {
        for (int yy = 0; yy < out_h; yy++) {
            vertical(mid, mstride, cv.bounds[2 * yy] - ry_lo, &cv, yy, lines, out_w * PS);
            store_row(t, yy, lines);
        }
    } else {
        const uint8_t *rows0 = s->rows + (size_t)(cx_lo - xoff) * PS;
        for (int y0 = 0; y0 < out_h; y0 += 8) {
            const int n = out_h - y0 < 8 ? out_h - y0 : 8;
            for (int r = 0; r < n; r++)
                vertical(rows0, stride, cv.bounds[2 * (y0 + r)] - ry_lo, &cv, y0 + r, mid + (size_t)r * mstride,
                         cols * PS);
            horizontal_rows(mid, mstride, n, cx_lo, cx_lo, cols, &ch, T, O, lines, ostride);
            for (int r = 0; r < n; r++) store_row(t, y0 + r, lines + (size_t)r * ostride);
        }
    }
    return RC_OK;
}

/* ---------------------------------------------------------------- JPEG source */

typedef struct {
    Source base;
    struct jpeg_decompress_struct *ci;
} JpegSource;

/* Start decoding only the columns around [lo, hi): jpeg_crop_scanline aligns the left
 * edge to an iMCU; MARGIN extra columns keep the chroma upsampling of the used columns
 * identical to a full decode. */
static int jpeg_crop(Source *src, int lo, int hi, int *xoff, int *width) {
    struct jpeg_decompress_struct *ci = ((JpegSource *)src)->ci;
    const int IW = (int)ci->output_width;
    jpeg_start_decompress(ci);
    JDIMENSION x = 0, w = (JDIMENSION)IW;
    const int dx0 = lo - MARGIN > 0 ? lo - MARGIN : 0, dx1 = hi + MARGIN < IW ? hi + MARGIN : IW;
    if (dx0 > 0 || dx1 < IW) {
        x = (JDIMENSION)dx0;
        w = (JDIMENSION)(dx1 - dx0);
        jpeg_crop_scanline(ci, &x, &w);
    }
    if (ci->output_components != PS) {
        snprintf(src->s->msg, sizeof src->s->msg, "unexpected %d output components", ci->output_components);
        return RC_VALUE;
    }
    *xoff = (int)x;
    *width = (int)ci->output_width; /* the cropped width */
    return RC_OK;
}

static int jpeg_skip(Source *src, int rows) {
    struct jpeg_decompress_struct *ci = ((JpegSource *)src)->ci;
    jpeg_skip_scanlines(ci, (JDIMENSION)rows);
    if ((int)ci->output_scanline != rows) { /* cannot happen */
        snprintf(src->s->msg, sizeof src->s->msg, "internal error: skipped to row %u, not %d", ci->output_scanline,
                 rows);
        return RC_VALUE;
    }
    return RC_OK;
}

static int jpeg_rows(Source *src, unsigned char **rows, int n) {
    struct jpeg_decompress_struct *ci = ((JpegSource *)src)->ci;
    for (int done = 0; done < n;) {
        int got = (int)jpeg_read_scanlines(ci, rows + done, (JDIMENSION)(n - done));
        if (got == 0) { /* cannot happen */
            snprintf(src->s->msg, sizeof src->s->msg, "libjpeg returned no scanline");
            return RC_VALUE;
        }
        done += got;
    }
    return RC_OK;
}

static int ends_with_eoi(const unsigned char *data, size_t len) {
    return len >= 4 && data[len - 2] == 0xFF && data[len - 1] == 0xD9;
}

#define FAIL(code, ...)                               \
    do {                                              \
        jpeg_abort_decompress(ci);                    \
        snprintf(s->msg, sizeof s->msg, __VA_ARGS__); \
        return (code);                                \
    } while (0)

/* Check the SOI marker and read the header of the JPEG in data, with libjpeg's errors
 * landing here: a macro, because the setjmp must be in the frame of the function that
 * goes on using ci (longjmp into a frame that has returned is undefined). That function
 * returns RC_VALUE (not a JPEG) or RC_JPEG (libjpeg's error, message in s->msg). */
#define READ_HEADER(s, ci, data, len)                                                                  \
    do {                                                                                               \
        (s)->msg[0] = 0;                                                                               \
        if ((len) < 4 || (data)[0] != 0xFF || (data)[1] != 0xD8) {                                     \
            snprintf((s)->msg, sizeof (s)->msg, (len) ? "not a JPEG (no SOI marker)" : "empty file (0 bytes)"); \
            return RC_VALUE;                                                                           \
        }                                                                                              \
        if (setjmp((s)->err.jump)) {                                                                   \
            jpeg_abort_decompress(ci);                                                                 \
            return RC_JPEG;                                                                            \
        }                                                                                              \
        jpeg_mem_src((ci), (data), (unsigned long)(len));                                              \
        jpeg_read_header((ci), TRUE);                                                                  \
    } while (0)

/* Decode the part of a JPEG the box needs and resize it into the target. libjpeg's
 * errors longjmp back here (READ_HEADER; resample runs inside this frame). */
static int run(State *s, const unsigned char *data, size_t len, const double box[4],
               const Target *t, int dct_scale, long long max_pixels) {
    struct jpeg_decompress_struct *ci = &s->cinfo;
    READ_HEADER(s, ci, data, len);
    if (check_size(s, ci->image_height, ci->image_width, max_pixels) != RC_OK) {
        jpeg_abort_decompress(ci);
        return RC_TOO_LARGE;
    }
    if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK)
        FAIL(RC_FALLBACK, "%s JPEG: not handled by the crop decoder",
             ci->jpeg_color_space == JCS_CMYK ? "CMYK" : "YCCK");
    if (!ends_with_eoi(data, len)) /* maybe truncated in a part never decoded here */
        FAIL(RC_FALLBACK, "JPEG does not end with an EOI marker");
    double b[4];
    int rc = clamp_box(s, box, ci->image_width, ci->image_height, b);
    if (rc != RC_OK) {
        jpeg_abort_decompress(ci);
        return rc;
    }
    ci->out_color_space = JCS_EXT_RGBX;
    ci->dct_method = JDCT_ISLOW;
    ci->do_fancy_upsampling = TRUE;
    double f = 1.0;
    if (dct_scale && b[2] - b[0] >= 2.0 * t->out_w && b[3] - b[1] >= 2.0 * t->out_h) {
        ci->scale_num = 1;
        ci->scale_denom = 2;
        f = 0.5;
    }
    jpeg_calc_output_dimensions(ci);
    JpegSource js = {{jpeg_crop, jpeg_skip, jpeg_rows, s}, ci};
    rc = resample(s, &js.base, (int)ci->output_width, (int)ci->output_height, (float)(b[0] * f),
                  (float)(b[1] * f), (float)(b[2] * f), (float)(b[3] * f), t);
    jpeg_abort_decompress(ci); /* the rest of the image is never decoded */
    return rc;
}

/* ---------------------------------------------------------------- array source */

typedef struct {
    Source base;
    const uint8_t *pixels;
    size_t row_bytes;
    int channels; /* 1 (gray), 3 (RGB) or 4 (RGBA: alpha dropped) */
    int y, xoff, width;
} ArraySource;

static int array_crop(Source *src, int lo, int hi, int *xoff, int *width) {
    ArraySource *a = (ArraySource *)src;
    a->xoff = *xoff = lo;
    a->width = *width = hi - lo;
    return RC_OK;
}

static int array_skip(Source *src, int rows) {
    ((ArraySource *)src)->y += rows;
    return RC_OK;
}

/* Rows of HWC uint8 pixels as RGBX, as turbofeed.decode.cpu.as_rgb sees them. */
static int array_rows(Source *src, unsigned char **rows, int n) {
    ArraySource *a = (ArraySource *)src;
    for (int r = 0; r < n; r++, a->y++) {
        const uint8_t *p = a->pixels + (size_t)a->y * a->row_bytes + (size_t)a->xoff * a->channels;
        unsigned char *d = rows[r];
        if (a->channels == 1) {
            for (int x = 0; x < a->width; x++, d += PS) d[0] = d[1] = d[2] = p[x], d[3] = 0;
        } else {
            for (int x = 0; x < a->width; x++, d += PS, p += a->channels)
                d[0] = p[0], d[1] = p[1], d[2] = p[2], d[3] = 0;
        }
    }
    return RC_OK;
}

/* Resize the box of an H x W image of uint8 pixels (channels 1, 3 or 4) into the target. */
static int run_array(State *s, const uint8_t *pixels, int H, int W, int channels, const double box[4],
                     const Target *t, long long max_pixels) {
    s->msg[0] = 0;
    double b[4];
    int rc = check_size(s, (unsigned long long)H, (unsigned long long)W, max_pixels);
    if (rc == RC_OK) rc = clamp_box(s, box, W, H, b);
    if (rc != RC_OK) return rc;
    ArraySource as = {{array_crop, array_skip, array_rows, s}, pixels, (size_t)W * channels, channels, 0, 0, W};
    return resample(s, &as.base, W, H, (float)b[0], (float)b[1], (float)b[2], (float)b[3], t);
}

/* ---------------------------------------------------------------- Python */

static int raise_for(int rc, const char *msg) {
    switch (rc) {
        case RC_OK: return 0;
        case RC_NOMEM: PyErr_NoMemory(); return -1;
        case RC_FALLBACK: PyErr_SetString(PyExc_NotImplementedError, msg); return -1;
        case RC_JPEG: PyErr_Format(PyExc_ValueError, "bad JPEG: %s", msg); return -1;
        default: PyErr_SetString(PyExc_ValueError, msg); return -1;
    }
}

static const char *skip_order(const char *fmt) {
    if (fmt == NULL) return "B";
    while (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '>' || *fmt == '!') fmt++;
    return fmt;
}

static int read_triple(PyObject *obj, const char *name, float out[3]) {
    PyObject *seq = PySequence_Fast(obj, "");
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 3) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be 3 numbers", name);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred()) { Py_DECREF(seq); return -1; }
        out[i] = (float)v;
    }
    Py_DECREF(seq);
    return 0;
}

PyDoc_STRVAR(crop_resize_doc,
"crop_resize(data, x0, y0, x1, y1, out, out_h, out_w, flip=False, channels_first=True,\n"
"            dct_scale=False, offset=None, factor=None, max_pixels=0)\n"
"--\n\n"
"Decode the part of a JPEG that box (x0, y0, x1, y1) needs (source pixel coordinates,\n"
"clamped to the image), resize it to out_h x out_w exactly like Pillow's BILINEAR resize\n"
"with a box, and write it into out (C-contiguous, 3*out_h*out_w items; CHW or HWC,\n"
"mirrored left-right when flip). out is uint8, or float32 when offset and factor (3\n"
"numbers each) are given: out = (pixel - offset) * factor. dct_scale decodes at half\n"
"size when the box is at least twice the output in both axes. Releases the GIL.\n\n"
"Raises turbofeed.errors.ImageTooLarge (a ValueError) when the header declares more than\n"
"max_pixels pixels (0: no limit), before decoding; ValueError (corrupt or not a JPEG, bad\n"
"arguments) or NotImplementedError (CMYK/YCCK, or no EOI marker at the end: use a\n"
"general decoder).");

/* One call's arguments, for call_released. */
typedef struct {
    const unsigned char *data;
    size_t len;
    const double *box;
    const Target *t;
    int dct;
    long long max_pixels;
} JpegJob;

typedef struct {
    const uint8_t *pixels;
    int H, W, channels;
    const double *box;
    const Target *t;
    long long max_pixels;
} ArrayJob;

static int run_jpeg_job(State *s, const void *arg) {
    const JpegJob *j = arg;
    return run(s, j->data, j->len, j->box, j->t, j->dct, j->max_pixels);
}

static int run_array_job(State *s, const void *arg) {
    const ArrayJob *j = arg;
    return run_array(s, j->pixels, j->H, j->W, j->channels, j->box, j->t, j->max_pixels);
}

/* fn(s, job) on this thread's State with the GIL released, then both buffers released;
 * None, or the exception rc stands for (the message, or the size of an image over
 * max_pixels, copied out of the State first). */
static PyObject *call_released(int (*fn)(State *, const void *), const void *job, long long max_pixels,
                               Py_buffer *out, Py_buffer *src) {
    char msg[sizeof(((State *)0)->msg)];
    unsigned long long size[2] = {0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    State *s = state_get();
    if (!s) {
        rc = RC_NOMEM;
    } else {
        rc = fn(s, job);
        memcpy(msg, s->msg, sizeof msg);
        memcpy(size, s->size, sizeof size);
        state_trim(s);
        state_put(s);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(out);
    PyBuffer_Release(src);
    if (rc == RC_TOO_LARGE) { /* ImageTooLarge(height, width, limit) words the message */
        PyObject *exc = PyObject_CallFunction(image_too_large, "KKL", size[0], size[1], max_pixels);
        if (exc) {
            PyErr_SetObject(image_too_large, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    if (raise_for(rc, msg) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Check out (and offset/factor) and fill the target; on failure an exception is set and
 * nothing is held. On success the caller releases out. */
static int get_target(PyObject *out_obj, int out_h, int out_w, int flip, int chw, PyObject *offset_obj,
                      PyObject *factor_obj, float offset[3], float factor[3], Py_buffer *out, Target *t) {
    const int normalise = offset_obj != Py_None || factor_obj != Py_None;
    if (normalise && (read_triple(offset_obj, "offset", offset) < 0 || read_triple(factor_obj, "factor", factor) < 0))
        return -1;
    if (out_h <= 0 || out_w <= 0 || out_h > (1 << 15) || out_w > (1 << 15)) {
        PyErr_Format(PyExc_ValueError, "output size %dx%d out of range", out_h, out_w);
        return -1;
    }
    if (PyObject_GetBuffer(out_obj, out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    const char *fmt = skip_order(out->format);
    const Py_ssize_t itemsize = normalise ? 4 : 1;
    if (strcmp(fmt, normalise ? "f" : "B") != 0 || out->itemsize != itemsize ||
        out->len != (Py_ssize_t)3 * out_h * out_w * itemsize) {
        PyErr_Format(PyExc_ValueError,
                     "out must be a C-contiguous %s buffer of 3*%d*%d items (got format '%s', %zd bytes)",
                     normalise ? "float32" : "uint8", out_h, out_w, fmt, out->len);
        PyBuffer_Release(out);
        return -1;
    }
    Target target = {out->buf, out_h, out_w, flip, chw, normalise ? offset : NULL, normalise ? factor : NULL};
    *t = target;
    return 0;
}

static PyObject *py_crop_resize(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"data", "x0", "y0", "x1", "y1", "out", "out_h", "out_w", "flip",
                             "channels_first", "dct_scale", "offset", "factor", "max_pixels", NULL};
    Py_buffer data, out;
    double box[4];
    PyObject *out_obj, *offset_obj = Py_None, *factor_obj = Py_None;
    int out_h, out_w, flip = 0, chw = 1, dct = 0;
    long long max_pixels = 0;
    float offset[3], factor[3];
    Target t;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*ddddOii|pppOOL:crop_resize", kwlist, &data,
                                     &box[0], &box[1], &box[2], &box[3], &out_obj, &out_h, &out_w,
                                     &flip, &chw, &dct, &offset_obj, &factor_obj, &max_pixels))
        return NULL;
    if (get_target(out_obj, out_h, out_w, flip, chw, offset_obj, factor_obj, offset, factor, &out, &t) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    const JpegJob job = {(const unsigned char *)data.buf, (size_t)data.len, box, &t, dct, max_pixels};
    return call_released(run_jpeg_job, &job, max_pixels, &out, &data);
}

PyDoc_STRVAR(resize_doc,
"resize(pixels, x0, y0, x1, y1, out, out_h, out_w, flip=False, channels_first=True,\n"
"       offset=None, factor=None, max_pixels=0)\n"
"--\n\n"
"crop_resize for pixels already decoded: a C-contiguous uint8 array (H, W), (H, W, 1),\n"
"(H, W, 3) or (H, W, 4) (gray repeated to RGB, alpha dropped). Same resize, output and\n"
"arguments; reads only the rows and columns the filter needs. Releases the GIL.\n\n"
"Raises ValueError for another dtype, shape or layout, or bad arguments, and\n"
"turbofeed.errors.ImageTooLarge for more than max_pixels pixels (0: no limit).");

static PyObject *py_resize(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"pixels", "x0", "y0", "x1", "y1", "out", "out_h", "out_w", "flip",
                             "channels_first", "offset", "factor", "max_pixels", NULL};
    Py_buffer pixels, out;
    double box[4];
    PyObject *pixels_obj, *out_obj, *offset_obj = Py_None, *factor_obj = Py_None;
    int out_h, out_w, flip = 0, chw = 1;
    long long max_pixels = 0;
    float offset[3], factor[3];
    Target t;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OddddOii|ppOOL:resize", kwlist, &pixels_obj, &box[0],
                                     &box[1], &box[2], &box[3], &out_obj, &out_h, &out_w, &flip, &chw,
                                     &offset_obj, &factor_obj, &max_pixels))
        return NULL;
    if (PyObject_GetBuffer(pixels_obj, &pixels, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const int channels = pixels.ndim == 2 ? 1 : pixels.ndim == 3 ? (int)pixels.shape[2] : 0;
    if (strcmp(skip_order(pixels.format), "B") != 0 || pixels.itemsize != 1 ||
        !(channels == 1 || channels == 3 || channels == 4) || pixels.shape[0] < 1 || pixels.shape[1] < 1 ||
        pixels.shape[0] > INT32_MAX / 8 || pixels.shape[1] > INT32_MAX / 8) {
        PyErr_Format(PyExc_ValueError, "pixels must be uint8 (H, W[, 1|3|4]), got format '%s' with %d dimensions",
                     skip_order(pixels.format), pixels.ndim);
        PyBuffer_Release(&pixels);
        return NULL;
    }
    if (get_target(out_obj, out_h, out_w, flip, chw, offset_obj, factor_obj, offset, factor, &out, &t) < 0) {
        PyBuffer_Release(&pixels);
        return NULL;
    }
    const ArrayJob job = {(const uint8_t *)pixels.buf, (int)pixels.shape[0], (int)pixels.shape[1], channels, box, &t,
                          max_pixels};
    return call_released(run_array_job, &job, max_pixels, &out, &pixels);
}

static const char *colorspace_name(J_COLOR_SPACE cs) {
    switch (cs) {
        case JCS_GRAYSCALE: return "gray";
        case JCS_RGB: return "rgb";
        case JCS_YCbCr: return "ycbcr";
        case JCS_CMYK: return "cmyk";
        case JCS_YCCK: return "ycck";
        default: return "unknown";
    }
}

static int read_header(State *s, const unsigned char *data, size_t len, int *h, int *w,
                       J_COLOR_SPACE *cs) {
    struct jpeg_decompress_struct *ci = &s->cinfo;
    READ_HEADER(s, ci, data, len);
    *h = (int)ci->image_height;
    *w = (int)ci->image_width;
    *cs = ci->jpeg_color_space;
    jpeg_abort_decompress(ci);
    return RC_OK;
}

PyDoc_STRVAR(header_doc,
"header(data) -> (height, width, colorspace)\n"
"--\n\n"
"Size and colour space ('gray', 'rgb', 'ycbcr', 'cmyk', 'ycck', 'unknown') from the\n"
"JPEG header. Raises ValueError for bytes that are not a readable JPEG header.");

static PyObject *py_header(PyObject *self, PyObject *arg) {
    Py_buffer data;
    int h = 0, w = 0, rc;
    J_COLOR_SPACE cs = JCS_UNKNOWN;
    char msg[sizeof(((State *)0)->msg)];
    (void)self;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    State *s = state_get(); /* a few microseconds: not worth releasing the GIL */
    if (!s) {
        rc = RC_NOMEM;
    } else {
        rc = read_header(s, (const unsigned char *)data.buf, (size_t)data.len, &h, &w, &cs);
        memcpy(msg, s->msg, sizeof msg);
        state_put(s);
    }
    PyBuffer_Release(&data);
    if (raise_for(rc, msg) < 0) return NULL;
    return Py_BuildValue("iis", h, w, colorspace_name(cs));
}

PyDoc_STRVAR(simd_doc,
"_simd(level=None) -> str\n"
"--\n\n"
"The resampling kernels in use ('avx2', 'sse2' or 'none'); with level ('best', 'avx2',\n"
"'sse2', 'none'), switch first (for tests and benchmarks; not thread-safe). All give\n"
"the same bytes. Raises ValueError for a level this build or CPU lacks.");

static PyObject *py_simd(PyObject *self, PyObject *args) {
    const char *level = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "|z:_simd", &level)) return NULL;
    if (level != NULL && simd_select(level) < 0) {
        PyErr_Format(PyExc_ValueError, "SIMD level %s is not available here", level);
        return NULL;
    }
    return PyUnicode_FromString(simd_level());
}

static PyMethodDef methods[] = {
    {"_simd", py_simd, METH_VARARGS, simd_doc},
    {"crop_resize", (PyCFunction)(void (*)(void))py_crop_resize, METH_VARARGS | METH_KEYWORDS,
     crop_resize_doc},
    {"header", py_header, METH_O, header_doc},
    {"resize", (PyCFunction)(void (*)(void))py_resize, METH_VARARGS | METH_KEYWORDS, resize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crop",
    "JPEG crop-window decode + Pillow-exact antialiased resize into a buffer (libjpeg-turbo).",
    -1, methods, NULL, NULL, NULL, NULL,
};

#define TF_STR2(x) #x
#define TF_STR(x) TF_STR2(x)

PyMODINIT_FUNC PyInit__crop(void) {
#ifndef _WIN32
    if (!state_key_ok) {
        if (pthread_key_create(&state_key, state_free) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "pthread_key_create failed");
            return NULL;
        }
        state_key_ok = 1;
    }
#endif
    if (!image_too_large) { /* a leaf module: safe while turbofeed itself is still importing */
        PyObject *errors = PyImport_ImportModule("turbofeed.errors");
        if (!errors) return NULL;
        image_too_large = PyObject_GetAttrString(errors, "ImageTooLarge");
        Py_DECREF(errors);
        if (!image_too_large) return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
#ifdef LIBJPEG_TURBO_VERSION
    const char *version = TF_STR(LIBJPEG_TURBO_VERSION);
#else
    const char *version = "";
#endif
    if (simd_select("best") < 0 ||
        PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION", version) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
