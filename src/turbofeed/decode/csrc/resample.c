/* The pure resampler (see resample.h).
 *
 * The resize reproduces Pillow's ImagingResample (src/libImaging/Resample.c) for
 * BILINEAR with a box: the same coefficients (computed in double from a float box,
 * normalised, rounded to 22-bit fixed point), two separable passes with the result of
 * the first rounded to uint8, in Pillow's order (Pillow 13 runs the vertical pass first
 * when the height shrinks more than twice as much as the width). With the same input
 * pixels the result is bit-identical to
 * Image.fromarray(pixels).resize((w, h), Image.BILINEAR, box=box).
 *
 * The buffers of a call are laid out once (layout.h); the passes are in kernels.c.
 */
#include "resample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "layout.h"

#define KEEP_BYTES ((size_t)32 << 20) /* scratch larger than this is freed after a call */

/* ---------------------------------------------------------------- scratch */

static int grow(unsigned char **p, size_t *cap, size_t need) {
    need += SLACK;
    if (need <= *cap) return 1;
    unsigned char *q = (unsigned char *)malloc(need);
    if (!q) return 0;
    free(*p);
    *p = q;
    *cap = need;
    return 1;
}

static void shrink(unsigned char **p, size_t *cap) {
    if (*cap > KEEP_BYTES) {
        free(*p);
        *p = NULL;
        *cap = 0;
    }
}

void tf_scratch_trim(Scratch *s) {
    shrink(&s->rows, &s->rows_cap);
    shrink(&s->tmp, &s->tmp_cap);
    shrink(&s->coef, &s->coef_cap);
}

void tf_scratch_free(Scratch *s) {
    free(s->rows); free(s->tmp); free(s->coef); free(s->w);
    s->rows = s->tmp = s->coef = s->w = NULL;
    s->rows_cap = s->tmp_cap = s->coef_cap = s->w_cap = 0;
}

static int out_of_memory(Scratch *s) {
    snprintf(s->msg, sizeof s->msg, "out of memory");
    return RC_NOMEM;
}

/* ---------------------------------------------------------------- coefficients (Pillow) */

static inline double bilinear_filter(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

/* Place the arrays of a Coeffs laid out as l in mem. */
static void coeffs_place(Coeffs *c, unsigned char *mem, const CoeffsLayout *l) {
    c->n = l->n;
    c->ksize = l->ksize;
    c->kpairs = l->kpairs;
    c->hi = (uint32_t *)mem;
    c->lo = c->hi + l->quads;
    c->k = (int32_t *)(c->lo + l->quads);
    c->bounds = (int *)(c->k + (size_t)l->n * l->ksize);
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for the triangle filter, then the
 * zero taps at both ends dropped (they add nothing), so only pixels that count are
 * read, and the hi/lo pairs made. */
static void coeffs_fill(Coeffs *c, const CoeffsLayout *l, int in_size, float in0, double *w) {
    const int out_size = c->n, ksize = c->ksize;
    const double scale = l->scale, support = 1.0 * l->filterscale, ss = 1.0 / l->filterscale;
    memset(c->hi, 0, l->quads * sizeof(uint32_t));
    memset(c->lo, 0, l->quads * sizeof(uint32_t));
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

/* ---------------------------------------------------------------- output */

/* Write output row yy from out_w RGBX pixels: layout, flip, dtype. */
static void store_row(const Target *t, int yy, const uint8_t *rgbx) {
    const int w = t->out_w, h = t->out_h;
    if (t->offset == NULL) {
        uint8_t *o = (uint8_t *)t->out;
        if (t->chw) {
            uint8_t *r = o + (size_t)yy * w, *g = r + (size_t)h * w, *b = g + (size_t)h * w;
            const int done = tf_planes(rgbx, w, t->flip, r, g, b);
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

int tf_check_size(Scratch *s, unsigned long long h, unsigned long long w, long long max_pixels) {
    if (max_pixels <= 0 || h * w <= (unsigned long long)max_pixels) return RC_OK;
    s->size[0] = h;
    s->size[1] = w;
    return RC_TOO_LARGE;
}

int tf_clamp_box(Scratch *s, const double box[4], double W, double H, double out[4]) {
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

int tf_resample(Scratch *s, Source *src, int IW, int IH, float x0, float y0, float x1, float y1, const Target *t) {
    const int out_h = t->out_h, out_w = t->out_w;
    Layout L;
    layout_coeffs(&L, IW, IH, x0, y0, x1, y1, out_w, out_h);
    if (!grow(&s->coef, &s->coef_cap, L.coef_bytes) || !grow(&s->w, &s->w_cap, L.weight_bytes))
        return out_of_memory(s);
    Coeffs ch, cv;
    coeffs_place(&ch, s->coef, &L.ch);
    coeffs_place(&cv, s->coef + L.ch.bytes, &L.cv);
    coeffs_fill(&ch, &L.ch, IW, x0, (double *)s->w);
    coeffs_fill(&cv, &L.cv, IH, y0, (double *)s->w);
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
    layout_rows(&L, rows, cols, width);
    if (!grow(&s->rows, &s->rows_cap, L.rows_bytes) || !grow(&s->tmp, &s->tmp_cap, L.tmp_bytes))
        return out_of_memory(s);
    const size_t stride = L.stride, mstride = L.mstride, ostride = L.ostride;
    uint8_t *mid = s->tmp, *lines = s->tmp + L.lines_at, *T = s->tmp + L.T_at, *O = s->tmp + L.O_at;
    if (ry_lo > 0 && (rc = src->skip(src, ry_lo)) != RC_OK) return rc;
    unsigned char *ptrs[BATCH];
    for (int y = ry_lo; y < ry_hi;) {
        const int n = L.horizontal_first ? (ry_hi - y < 8 ? ry_hi - y : 8) : (ry_hi - y < BATCH ? ry_hi - y : BATCH);
        uint8_t *first = s->rows + (L.horizontal_first ? 0 : stride * (size_t)(y - ry_lo));
        for (int i = 0; i < n; i++) ptrs[i] = first + stride * (size_t)i;
        if ((rc = src->read(src, ptrs, n)) != RC_OK) return rc;
        if (L.horizontal_first)
            tf_horizontal_rows(s->rows, stride, n, xoff, cx_lo, cols, &ch, T, O, mid + (size_t)(y - ry_lo) * mstride,
                               mstride);
        y += n;
    }

    if (L.horizontal_first) {
        for (int yy = 0; yy < out_h; yy++) {
            tf_vertical(mid, mstride, cv.bounds[2 * yy] - ry_lo, &cv, yy, lines, out_w * PS);
            store_row(t, yy, lines);
        }
    } else {
        const uint8_t *rows0 = s->rows + (size_t)(cx_lo - xoff) * PS;
        for (int y0 = 0; y0 < out_h; y0 += 8) {
            const int n = out_h - y0 < 8 ? out_h - y0 : 8;
            for (int r = 0; r < n; r++)
                tf_vertical(rows0, stride, cv.bounds[2 * (y0 + r)] - ry_lo, &cv, y0 + r, mid + (size_t)r * mstride,
                            cols * PS);
            tf_horizontal_rows(mid, mstride, n, cx_lo, cx_lo, cols, &ch, T, O, lines, ostride);
            for (int r = 0; r < n; r++) store_row(t, y0 + r, lines + (size_t)r * ostride);
        }
    }
    return RC_OK;
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

int tf_resize_array(Scratch *s, const uint8_t *pixels, int H, int W, int channels, const double box[4],
                    const Target *t, long long max_pixels) {
    s->msg[0] = 0;
    double b[4];
    int rc = tf_check_size(s, (unsigned long long)H, (unsigned long long)W, max_pixels);
    if (rc == RC_OK) rc = tf_clamp_box(s, box, W, H, b);
    if (rc != RC_OK) return rc;
    ArraySource as = {{array_crop, array_skip, array_rows, s}, pixels, (size_t)W * channels, channels, 0, 0, W};
    return tf_resample(s, &as.base, W, H, (float)b[0], (float)b[1], (float)b[2], (float)b[3], t);
}
