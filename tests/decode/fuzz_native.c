/* Fuzz run of the native decoder's C core (src/turbofeed/decode/csrc/, all but the
 * Python bindings), built by test_fuzz_native.py with AddressSanitizer and UBSan.
 *
 *   fuzz_native SEED ITERATIONS [SECONDS]
 *
 * Each iteration runs
 * (a) the pure resampler (tf_resize_array) on a random image (1..4 channels' layouts,
 *     1x1 up to 2000-pixel sides, noise or flat) with a random box (whole image, 1x1,
 *     sub-pixel, at the border, partly or wholly outside, NaN/inf, empty), output size
 *     (down to 1x1, up to huge upscales), flip, channels first/last, uint8 or float32,
 *     pixel limit and kernel level. The result must be the scalar kernel's HWC uint8
 *     result, moved (flip, layout) and normalised exactly, every output item written, values
 *     within the input's range; the return code must be the one the box and limit call for;
 * (b) the JPEG window decoder (tf_jpeg_crop_resize, tf_jpeg_header) on a small JPEG made
 *     here with libjpeg (gray, 4:2:0, 4:2:2, 4:4:4, 4:4:0, progressive, arithmetic, restart
 *     markers, CMYK): intact, its result must equal the resampler's on the fully decoded
 *     image; truncated at a random point (with or without an EOI marker after), with random
 *     bytes flipped, or both, every call must return a code, and the intact JPEG must decode
 *     again right after;
 * (c) the dataset index's reads (tarindex.c, jpeg_sizes.c) on a file: a tar of random
 *     members written here (ustar headers, random names, sizes and padding), intact, cut or
 *     with bytes flipped, through tf_tar_walk (an intact one must give back its members,
 *     a damaged one any verdict) and tf_gather (random spans, some past the end); the
 *     intact and the damaged JPEG of (b) through tf_jpeg_sizes (the intact one's size
 *     must come back, with or without the first read's 16 KiB cut), at random offsets;
 * (d) a chunk (chunk.c): the intact and a damaged JPEG of (b) and random bytes in a file,
 *     through tf_chunk_read (exact buffer, scans checked or not, a wrong identity stamp now and then: the intact
 *     one must give its size, a wrong stamp TF_READ_CHANGED) and tf_chunk_run into rows of
 *     one batch, windows from a program (the intact one must give what
 *     tf_jpeg_crop_resize gives for the window tf_windows gives).
 * Every buffer handed to the code under test has its exact size and the scratch buffers
 * are freed after each call, so the sanitizers see any access outside them (beyond the
 * SLACK bytes layout.h promises). A failed check prints why to stderr and aborts; at the
 * end one line on stdout counts the calls. Stops early after SECONDS (default: no limit).
 */
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/stat.h>

#include <jpeglib.h>

#include "chunk.h"
#include "jpeg_sizes.h"
#include "windows.h"
#include "jpeg_window.h"
#include "kernels.h"
#include "resample.h"
#include "tarindex.h"

static unsigned long long rng_state;
static long iteration;

static unsigned long long next64(void) { /* splitmix64 */
    unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static int below(int n) { return (int)(next64() % (unsigned long long)n); }  /* [0, n) */
static int between(int lo, int hi) { return lo + below(hi - lo + 1); }      /* [lo, hi] */
static double uniform(double lo, double hi) { return lo + (hi - lo) * (double)(next64() >> 11) / 9007199254740992.0; }
static int chance(int percent) { return below(100) < percent; }

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz_native: iteration %ld: ", iteration);        \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* After each call: trimmed as the bindings do, then freed, so the next call's buffers
 * have exactly the size it asks for. */
static void release(Scratch *s) {
    tf_scratch_trim(s);
    tf_scratch_free(s);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    CHECK(p != NULL, "out of memory (%zu bytes)", n);
    return p;
}

static const char *LEVELS[] = {"none", "sse2", "avx2"};
static int levels_ok[3];
static long calls[2][RC_TOO_LARGE + 1]; /* [resample, jpeg][return code] */
static long walks[2], sizes_seen[3];       /* [plain, not plain], [ok, none, ask] */

static void random_level(void) {
    int i;
    do i = below(3); while (!levels_ok[i]);
    CHECK(tf_simd_select(LEVELS[i]) == 0, "level %s", LEVELS[i]);
}

/* A box on a W x H image: inside, at the border, tiny, outside, empty or not finite. */
static void random_box(double W, double H, double b[4]) {
    const int kind = below(10);
    if (kind == 0) {
        b[0] = 0, b[1] = 0, b[2] = W, b[3] = H;
    } else if (kind == 1) { /* one pixel, or less */
        const double x = below((int)W), y = below((int)H), s = chance(50) ? 1.0 : uniform(0.001, 1.0);
        b[0] = x, b[1] = y, b[2] = x + s, b[3] = y + s;
    } else if (kind == 2) { /* at the right and bottom borders */
        b[0] = W - uniform(0.01, W), b[1] = H - uniform(0.01, H), b[2] = W, b[3] = H;
    } else if (kind == 3) { /* partly or wholly outside */
        b[0] = uniform(-W, W), b[1] = uniform(-H, H);
        b[2] = b[0] + uniform(0.0, 2 * W), b[3] = b[1] + uniform(0.0, 2 * H);
    } else if (kind == 4) { /* not finite, or empty */
        const double odd[] = {NAN, INFINITY, -INFINITY, 0.0, W, H};
        for (int i = 0; i < 4; i++) b[i] = chance(50) ? odd[below(6)] : uniform(-1, i % 2 ? H : W);
    } else { /* inside */
        b[0] = uniform(0, W - 0.01), b[1] = uniform(0, H - 0.01);
        b[2] = uniform(b[0] + 0.01, W), b[3] = uniform(b[1] + 0.01, H);
        if (chance(30)) b[0] = floor(b[0]), b[1] = floor(b[1]), b[2] = ceil(b[2]), b[3] = ceil(b[3]);
    }
}

static void random_out_size(const double b[4], int *oh, int *ow) {
    if (chance(15)) { /* huge upscale */
        *oh = between(64, 400), *ow = between(64, 400);
    } else if (chance(15)) {
        *oh = between(1, 3), *ow = between(1, 3);
    } else {
        const double w = isfinite(b[2] - b[0]) ? fabs(b[2] - b[0]) : 100;
        const double h = isfinite(b[3] - b[1]) ? fabs(b[3] - b[1]) : 100;
        *ow = (int)fmin(300, fmax(1, w * uniform(0.05, 2.0)));
        *oh = (int)fmin(300, fmax(1, h * uniform(0.05, 2.0)));
    }
}

static int expected_rc(const double box[4], double W, double H, long long max_pixels) {
    if (max_pixels > 0 && W * H > (double)max_pixels) return RC_TOO_LARGE;
    const double x0 = box[0] > 0 ? box[0] : 0.0, y0 = box[1] > 0 ? box[1] : 0.0;
    const double x1 = box[2] < W ? box[2] : W, y1 = box[3] < H ? box[3] : H;
    return x1 > x0 && y1 > y0 ? RC_OK : RC_VALUE;
}

/* The target's output against ref (HWC uint8, unflipped): moved and normalised exactly,
 * every item written (out was filled with a pattern no result has: NaN for float32, and
 * for uint8 the ref was filled with another byte than out). */
static void check_same(const Target *t, const uint8_t *ref) {
    const int h = t->out_h, w = t->out_w;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                const uint8_t want = ref[((size_t)y * w + (t->flip ? w - 1 - x : x)) * 3 + c];
                const size_t at = t->chw ? ((size_t)c * h + y) * w + x : ((size_t)y * w + x) * 3 + c;
                if (t->offset) {
                    const float got = ((const float *)t->out)[at], v = ((float)want - t->offset[c]) * t->factor[c];
                    CHECK(got == v, "float32 (%d, %d, %d): %g, not %g", y, x, c, got, v);
                } else {
                    const uint8_t got = ((const uint8_t *)t->out)[at];
                    CHECK(got == want, "uint8 (%d, %d, %d) at level %s: %d, not %d", y, x, c, tf_simd_level(), got,
                          want);
                }
            }
}

/* out_h x out_w with a random flip, layout, dtype and kernel level; out filled with fill. */
static Target random_target(int oh, int ow, float offset[3], float factor[3], int fill) {
    Target t = {NULL, oh, ow, chance(50), chance(50), NULL, NULL};
    if (chance(30)) {
        for (int c = 0; c < 3; c++) offset[c] = (float)uniform(0, 255), factor[c] = (float)uniform(-4, 4);
        t.offset = offset, t.factor = factor;
        fill = 0xFF; /* NaN */
    }
    const size_t bytes = (size_t)3 * oh * ow * (t.offset ? sizeof(float) : 1);
    t.out = xmalloc(bytes);
    memset(t.out, fill, bytes);
    random_level();
    return t;
}

/* ---------------------------------------------------------------- (a) the resampler */

static void fuzz_resample(Scratch *s) {
    int H, W;
    if (chance(10)) H = between(1, 4), W = between(1, 2000);
    else if (chance(10)) H = between(1, 2000), W = between(1, 4);
    else if (chance(20)) H = between(100, 700), W = between(100, 700);
    else H = between(1, 64), W = between(1, 64);
    const int channels = (int[]){1, 3, 4}[below(3)];
    const size_t n = (size_t)H * W * channels;
    uint8_t *pixels = xmalloc(n);
    const int flat = chance(15), lo = below(256), hi = flat ? lo : between(lo, 255);
    for (size_t i = 0; i < n; i++) pixels[i] = (uint8_t)(flat ? lo : between(lo, hi));
    double box[4];
    random_box(W, H, box);
    int oh, ow;
    random_out_size(box, &oh, &ow);
    const long long max_pixels = chance(10) ? between(1, H * W) : chance(50) ? 0 : 1 << 22;

    /* the reference: scalar kernels, HWC, no flip, uint8 */
    uint8_t *ref = xmalloc((size_t)3 * oh * ow);
    memset(ref, 0xA5, (size_t)3 * oh * ow);
    Target rt = {ref, oh, ow, 0, 0, NULL, NULL};
    CHECK(tf_simd_select("none") == 0, "level none");
    const int want = expected_rc(box, W, H, max_pixels);
    const int rc = tf_resize_array(s, pixels, H, W, channels, box, &rt, max_pixels);
    release(s);
    calls[0][rc]++;
    CHECK(rc == want, "%dx%dx%d box (%g, %g, %g, %g) limit %lld: rc %d, not %d (%s)", H, W, channels, box[0],
          box[1], box[2], box[3], max_pixels, rc, want, s->msg);
    if (rc == RC_OK) {
        for (size_t i = 0; i < (size_t)3 * oh * ow; i += 3) {
            for (int c = 0; c < 3; c++)
                CHECK(ref[i + c] + 2 >= lo && ref[i + c] <= hi + 2, "value %d outside the input's [%d, %d]", ref[i + c],
                      lo, hi);
            if (channels == 1) CHECK(ref[i] == ref[i + 1] && ref[i] == ref[i + 2], "gray became colour");
        }
        float offset[3], factor[3];
        Target t = random_target(oh, ow, offset, factor, 0x5A);
        CHECK(tf_resize_array(s, pixels, H, W, channels, box, &t, max_pixels) == RC_OK, "%s", s->msg);
        release(s);
        calls[0][RC_OK]++;
        check_same(&t, ref);
        free(t.out);
    }
    free(ref);
    free(pixels);
}

/* ---------------------------------------------------------------- (b) the JPEG decoder */

typedef struct {
    unsigned char *data;
    unsigned long len;
    int H, W, cmyk;
} Jpeg;

static Jpeg encode(void) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    Jpeg j = {NULL, 0, chance(20) ? between(1, 16) : between(8, 200), chance(20) ? between(1, 16) : between(8, 200), 0};
    if (chance(10)) j.W = between(300, 900);
    const int comps = chance(15) ? 1 : chance(8) ? 4 : 3;
    j.cmyk = comps == 4;
    c.err = jpeg_std_error(&err); /* libjpeg exits on an error here: a bug of this file */
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &j.data, &j.len);
    c.image_width = (JDIMENSION)j.W;
    c.image_height = (JDIMENSION)j.H;
    c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, between(5, 100), TRUE);
    if (comps == 3) {
        static const int sampling[][2] = {{2, 2}, {2, 1}, {1, 1}, {1, 2}};
        const int k = below(4);
        c.comp_info[0].h_samp_factor = sampling[k][0];
        c.comp_info[0].v_samp_factor = sampling[k][1];
    }
    if (chance(25)) jpeg_simple_progression(&c);
    if (chance(15)) c.restart_interval = (unsigned)between(1, 8);
    c.optimize_coding = chance(30);
#ifdef C_ARITH_CODING_SUPPORTED
    if (chance(10)) c.arith_code = TRUE, c.optimize_coding = FALSE; /* Huffman tables only */
#endif
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = xmalloc((size_t)j.W * comps);
    const int smooth = chance(50), base = below(256);
    for (int y = 0; y < j.H; y++) {
        for (int i = 0; i < j.W * comps; i++)
            row[i] = (unsigned char)(smooth ? (base + i / comps + 3 * y + 50 * (i % comps)) & 255 : below(256));
        JSAMPROW rows[1] = {row};
        jpeg_write_scanlines(&c, rows, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return j;
}

/* The whole JPEG decoded to RGBX the way the window decoder decodes (its reference). */
static uint8_t *decode_full(const Jpeg *j) {
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr err;
    d.err = jpeg_std_error(&err);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, j->data, j->len);
    jpeg_read_header(&d, TRUE);
    d.out_color_space = JCS_EXT_RGBX;
    d.dct_method = JDCT_ISLOW;
    d.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&d);
    uint8_t *pixels = xmalloc((size_t)j->H * j->W * 4);
    while (d.output_scanline < d.output_height) {
        JSAMPROW rows[1] = {pixels + (size_t)d.output_scanline * j->W * 4};
        jpeg_read_scanlines(&d, rows, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    return pixels;
}

/* The intact JPEG: a box of it decoded by the window decoder equals the resampler's
 * result on the full decode. */
static void check_intact(JpegWindow *jw, const Jpeg *j, const uint8_t *full) {
    double box[4];
    random_box(j->W, j->H, box);
    int oh, ow;
    random_out_size(box, &oh, &ow);
    float offset[3], factor[3];
    Target t = random_target(oh, ow, offset, factor, 0x3C);
    unsigned char *data = xmalloc(j->len);
    memcpy(data, j->data, j->len);
    const int rc = tf_jpeg_crop_resize(jw, data, j->len, box, &t, 0, chance(50), 1 << 22);
    release(tf_jpeg_scratch(jw));
    calls[1][rc]++;
    const int want = j->cmyk ? RC_FALLBACK : expected_rc(box, j->W, j->H, 0);
    CHECK(rc == want, "intact %dx%d JPEG, box (%g, %g, %g, %g): rc %d, not %d (%s)", j->H, j->W, box[0], box[1],
          box[2], box[3], rc, want, tf_jpeg_scratch(jw)->msg);
    CHECK(tf_jpeg_check(jw, data, j->len, 0) == RC_OK, "check of the intact JPEG: %s", tf_jpeg_scratch(jw)->msg);
    if (rc == RC_OK) {
        uint8_t *ref = xmalloc((size_t)3 * oh * ow);
        memset(ref, 0xC3, (size_t)3 * oh * ow);
        Target rt = {ref, oh, ow, 0, 0, NULL, NULL};
        Scratch s = {{0}, {0, 0}, NULL, 0, NULL, 0, NULL, 0, NULL, 0};
        CHECK(tf_simd_select("none") == 0, "level none");
        CHECK(tf_resize_array(&s, full, j->H, j->W, 4, box, &rt, 0) == RC_OK, "%s", s.msg);
        release(&s);
        check_same(&t, ref);
        free(ref);
    }
    free(data);
    free(t.out);
}

/* A damaged copy of the JPEG: any return code, no crash, nothing outside its buffers. */
static void check_damaged(JpegWindow *jw, const Jpeg *j) {
    size_t len = j->len;
    unsigned char *data = xmalloc(len + 2);
    memcpy(data, j->data, len);
    const int how = below(3); /* 0: truncated, 1: bytes flipped, 2: both */
    if (how != 1) {
        len = (size_t)below((int)len + 1);
        if (chance(50)) data[len++] = 0xFF, data[len++] = 0xD9; /* so the decoder does not leave it to another */
    }
    if (how != 0 && len > 0)
        for (int k = between(1, 8); k > 0; k--) data[below((int)len)] ^= (unsigned char)between(1, 255);
    unsigned char *exact = xmalloc(len);
    memcpy(exact, data, len);
    double box[4];
    random_box(j->W, j->H, box);
    int oh, ow;
    random_out_size(box, &oh, &ow);
    float offset[3], factor[3];
    Target t = random_target(oh, ow, offset, factor, 0);
    /* always a limit: a corrupt header may declare 65535 x 65535 */
    const long long max_pixels = chance(10) ? between(1, j->H * j->W) : 1 << 22;
    const int rc = tf_jpeg_crop_resize(jw, exact, len, box, &t, chance(30), chance(50), max_pixels);
    release(tf_jpeg_scratch(jw));
    CHECK(rc >= RC_OK && rc <= RC_TOO_LARGE, "rc %d", rc);
    const int crc = tf_jpeg_check(jw, exact, len, max_pixels);
    CHECK(crc == RC_OK || crc == RC_VALUE || crc == RC_JPEG || crc == RC_TOO_LARGE, "check rc %d", crc);
    calls[1][rc]++;
    int h, w;
    const char *cs;
    const int hrc = tf_jpeg_header(jw, exact, len, &h, &w, &cs);
    CHECK(hrc == RC_OK || hrc == RC_VALUE || hrc == RC_JPEG, "header rc %d", hrc);
    free(t.out);
    free(exact);
    free(data);
}

/* ---------------------------------------------------------------- (c) the index's reads */

/* A file holding data[0:len] (removed when closed). */
static FILE *file_of(const unsigned char *data, size_t len) {
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    CHECK(fwrite(data, 1, len, f) == len, "fwrite");
    CHECK(fflush(f) == 0, "fflush");
    return f;
}

static void octal(unsigned char *field, int width, long long v) { /* width - 1 digits and a NUL */
    for (int i = width - 2; i >= 0; i--, v >>= 3) field[i] = (unsigned char)('0' + (v & 7));
    field[width - 1] = 0;
}

/* A ustar tar of random members; their names, data offsets and sizes in names/at/size. */
static unsigned char *random_tar(size_t *len, int *count, char names[][40], int64_t *at, int64_t *size) {
    *count = between(0, 12);
    size_t cap = 1024 + (size_t)*count * (512 + 4096), n = 0;
    unsigned char *tar = xmalloc(cap);
    memset(tar, 0, cap);
    for (int m = 0; m < *count; m++) {
        unsigned char *h = tar + n;
        snprintf(names[m], 40, "%s%d.%s", chance(30) ? "dir/" : "", between(0, 5), chance(50) ? "jpg" : "cls");
        memcpy(h, names[m], strlen(names[m]));
        octal(h + 100, 8, 0644), octal(h + 108, 8, 0), octal(h + 116, 8, 0);
        size[m] = between(0, 4000);
        octal(h + 124, 12, size[m]), octal(h + 136, 12, 0);
        h[156] = '0';
        memcpy(h + 257, "ustar\0" "00", 8);
        memset(h + 148, ' ', 8);
        long sum = 0;
        for (int i = 0; i < 512; i++) sum += h[i];
        octal(h + 148, 7, sum), h[155] = ' ';
        at[m] = (int64_t)n + 512;
        for (int i = 0; i < size[m]; i++) tar[n + 512 + i] = (unsigned char)below(256);
        n += 512 + (size_t)((size[m] + 511) / 512 * 512);
    }
    *len = n + 1024; /* the end-of-archive blocks */
    return tar;
}

static void fuzz_index(const Jpeg *j) {
    char names[12][40];
    int64_t at[12], size[12];
    int count;
    size_t len;
    unsigned char *tar = random_tar(&len, &count, names, at, size);
    const int how = below(4); /* 0: intact, 1: cut, 2: bytes flipped, 3: both */
    if (how & 1) len = (size_t)below((int)len + 1);
    if ((how & 2) && len > 0)
        for (int k = between(1, 4); k > 0; k--) tar[below((int)len)] ^= (unsigned char)between(1, 255);
    FILE *f = file_of(tar, len);
    TfMembers m;
    const int rc = tf_tar_walk(fileno(f), (int64_t)len, &m);
    CHECK(rc == TF_TAR_PLAIN || rc == TF_TAR_NOT_PLAIN, "tar walk rc %d", rc);
    walks[rc == TF_TAR_PLAIN ? 0 : 1]++;
    if (how == 0) {
        CHECK(rc == TF_TAR_PLAIN && m.count == (size_t)count, "intact tar: rc %d, %zu members of %d", rc, m.count,
              count);
        for (int i = 0; i < count; i++) {
            const int64_t from = i ? m.name_end[i - 1] : 0;
            CHECK(m.offset[i] == at[i] && m.size[i] == size[i] && m.name_end[i] - from == (int64_t)strlen(names[i]) &&
                  memcmp(m.names + from, names[i], strlen(names[i])) == 0, "member %d", i);
        }
    }
    if (rc == TF_TAR_PLAIN) tf_members_free(&m);
    int64_t off[4], sz[4];
    size_t total = 0;
    for (int i = 0; i < 4; i++) {
        off[i] = below((int)len + 600);
        sz[i] = below(3000);
        total += (size_t)sz[i];
    }
    unsigned char *out = xmalloc(total + 1);
    const int grc = tf_gather(fileno(f), off, sz, 4, out);
    int inside = 1;
    for (int i = 0; i < 4; i++) inside &= sz[i] == 0 || off[i] + sz[i] <= (int64_t)len; /* nothing to read: no end to pass */
    CHECK(grc == (inside ? TF_TAR_PLAIN : TF_IO), "gather rc %d", grc);
    if (inside)
        for (int i = 0, o = 0; i < 4; o += (int)sz[i], i++)
            CHECK(memcmp(out + o, tar + off[i], (size_t)sz[i]) == 0, "gather bytes of span %d", i);
    free(out);
    fclose(f);
    free(tar);
    /* the JPEG of (b), intact after some padding, then damaged copies at random offsets */
    const size_t pad = (size_t)below(5000);
    unsigned char *img = xmalloc(pad + j->len * 2);
    memset(img, 7, pad);
    memcpy(img + pad, j->data, j->len);
    memcpy(img + pad + j->len, j->data, j->len);
    const size_t cut = (size_t)below((int)j->len);
    for (int k = between(0, 3); k > 0; k--) img[pad + j->len + below((int)j->len)] ^= (unsigned char)between(1, 255);
    f = file_of(img, pad + j->len * 2);
    int64_t ioff[3] = {(int64_t)pad, (int64_t)(pad + j->len), below((int)(pad + j->len * 2))};
    int64_t isz[3] = {(int64_t)j->len, (int64_t)cut, between(0, 70000)};
    int32_t res[9];
    CHECK(tf_jpeg_sizes(fileno(f), ioff, isz, 3, res) == 0, "jpeg sizes");
    for (int i = 0; i < 3; i++) {
        CHECK(res[3 * i + 2] >= TF_SIZE_OK && res[3 * i + 2] <= TF_SIZE_ASK, "verdict %d", res[3 * i + 2]);
        CHECK(res[3 * i + 2] == TF_SIZE_OK || (res[3 * i] == 0 && res[3 * i + 1] == 0), "no size, yet one");
        sizes_seen[res[3 * i + 2]]++;
    }
    CHECK(j->cmyk ? res[2] == TF_SIZE_ASK : (res[2] == TF_SIZE_OK && res[0] == j->H && res[1] == j->W),
          "intact %dx%d JPEG: %d %d verdict %d", j->H, j->W, res[0], res[1], res[2]);
    fclose(f);
    free(img);
}

/* ---------------------------------------------------------------- (d) a chunk */

static long chunk_reads[TF_READ_SHORT + 1];

static void fuzz_chunk(JpegWindow *jw, const Jpeg *j) {
    const size_t junk = (size_t)below(3000);
    const size_t total = j->len * 2 + junk;
    unsigned char *file = xmalloc(total);
    memcpy(file, j->data, j->len);
    memcpy(file + j->len, j->data, j->len);
    for (int k = between(1, 6); k > 0; k--) file[j->len + below((int)j->len)] ^= (unsigned char)between(1, 255);
    for (size_t i = 0; i < junk; i++) file[2 * j->len + i] = (unsigned char)below(256);
    FILE *f = file_of(file, total);
    struct stat st;
    CHECK(fstat(fileno(f), &st) == 0, "fstat");
    const int64_t stamp[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                              (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec};
    enum { N = 3 };
    int32_t fds[N];
    int64_t offsets[N] = {0, (int64_t)j->len, (int64_t)(2 * j->len)}, sizes[N] = {(int64_t)j->len, (int64_t)j->len,
                                                                                   (int64_t)junk};
    int64_t stamps[3 * N], starts[N];
    const int wrong = chance(20) ? below(N) : -1;
    int64_t at = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = fileno(f);
        memcpy(stamps + 3 * i, stamp, sizeof stamp);
        if (i == wrong) stamps[3 * i + 2] += 1;
        starts[i] = at;
        at += sizes[i];
    }
    unsigned char *buf = xmalloc((size_t)at + 1);
    int32_t head[3 * N];
    uint8_t read_checks[N];
    for (int i = 0; i < N; i++) read_checks[i] = (uint8_t)chance(50);
    tf_chunk_read(jw, N, fds, offsets, sizes, stamps, buf, starts, chance(50) ? read_checks : NULL, 1 << 22, head);
    release(tf_jpeg_scratch(jw));
    for (int i = 0; i < N; i++) {
        const int32_t status = head[3 * i];
        CHECK(status >= TF_READ_OK && status <= TF_READ_SHORT, "read status %d", status);
        chunk_reads[status]++;
        if (i == wrong) CHECK(status == TF_READ_CHANGED, "a wrong stamp read as %d", status);
    }
    if (wrong != 0)
        CHECK(head[0] == (j->cmyk ? TF_READ_GENERAL : TF_READ_OK) && (j->cmyk || (head[1] == j->H && head[2] == j->W)),
              "intact %dx%d JPEG read as %d (%d x %d)", j->H, j->W, head[0], head[1], head[2]);
    /* the whole CPU path of the chunk, each sample into a row of a 4-row batch, its window
     * a centre crop (or, now and then, a resize to another size: the per-sample path) */
    int oh = between(1, 64), ow = between(1, 64);
    double prog[4 + TF_OP_WORDS] = {TF_PROGRAM_VERSION, 1, chance(50) ? 7 : -1, 0.5, TF_OP_CENTER_CROP, oh, ow};
    CHECK(tf_program_check(prog, 4 + TF_OP_WORDS) == 0, "program");
    float offset[3], factor[3];
    Target base = random_target(oh, ow, offset, factor, 0);
    if (chance(10)) base.out_h = oh + 1; /* windows of another size than the rows */
    const size_t row = (size_t)3 * base.out_h * ow * (base.offset ? sizeof(float) : 1);
    unsigned char *out = xmalloc(4 * row);
    uint8_t checks[N];
    int64_t rows[N], gids[N];
    for (int i = 0; i < N; i++) {
        checks[i] = (uint8_t)chance(50);
        rows[i] = (i + 1) % 4;
        gids[i] = between(0, 1000);
    }
    int32_t status[2 * N];
    const long long reading = tf_chunk_run(jw, N, fds, offsets, sizes, stamps, gids, checks, rows, prog, 42, out,
                                           row, &base, 1 << 22, 0, status);
    release(tf_jpeg_scratch(jw));
    fclose(f);
    CHECK(reading >= 0, "run: no memory");
    for (int i = 0; i < N; i++) {
        CHECK(status[2 * i] >= TF_RUN_OK && status[2 * i] <= TF_READ_SHORT, "run code %d", status[2 * i]);
        if (i == wrong) CHECK(status[2 * i] == TF_READ_CHANGED, "a wrong stamp ran as %d", status[2 * i]);
    }
    if (wrong != 0 && base.out_h == oh && !j->cmyk) { /* the intact JPEG: what tf_jpeg_crop_resize gives */
        double box[4];
        int64_t size[2];
        uint8_t flip;
        const int32_t h = j->H, w = j->W;
        tf_windows(prog, 42, 1, gids, &h, &w, box, size, &flip);
        Target one = base;
        one.out = xmalloc(row);
        one.flip = flip;
        const int rc = tf_jpeg_crop_resize(jw, buf, (size_t)sizes[0], box, &one, 0, checks[0], 1 << 22);
        release(tf_jpeg_scratch(jw));
        CHECK((rc == RC_OK) == (status[0] == TF_RUN_OK), "the chunk's code %d, crop_resize's %d", status[0], rc);
        if (rc == RC_OK) CHECK(memcmp(out + row, one.out, row) == 0, "the chunk's row differs from crop_resize's");
        free(one.out);
    }
    free(out);
    free(base.out);
    free(buf);
    free(file);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SEED ITERATIONS [SECONDS]\n", argv[0]);
        return 2;
    }
    rng_state = strtoull(argv[1], NULL, 10);
    const long iterations = strtol(argv[2], NULL, 10);
    const double seconds = argc > 3 ? strtod(argv[3], NULL) : 0;
    for (int i = 0; i < 3; i++) levels_ok[i] = tf_simd_select(LEVELS[i]) == 0;
    CHECK(levels_ok[0], "the scalar kernels are always there");
    Scratch s = {{0}, {0, 0}, NULL, 0, NULL, 0, NULL, 0, NULL, 0};
    JpegWindow *jw = tf_jpeg_new();
    CHECK(jw != NULL, "tf_jpeg_new");
    Jpeg j = {NULL, 0, 0, 0, 0};
    uint8_t *full = NULL;
    const time_t start = time(NULL);
    for (iteration = 0; iteration < iterations; iteration++) {
        if (seconds > 0 && difftime(time(NULL), start) >= seconds) break;
        fuzz_resample(&s);
        if (iteration % 8 == 0) {
            free(j.data);
            free(full);
            j = encode();
            full = j.cmyk ? NULL : decode_full(&j);
        }
        check_damaged(jw, &j);
        check_intact(jw, &j, full); /* also: the damaged call left nothing behind */
        fuzz_index(&j);
        fuzz_chunk(jw, &j);
    }
    free(j.data);
    free(full);
    tf_jpeg_free(jw);
    tf_scratch_free(&s);
    printf("fuzz_native seed %s: %ld iterations; resample ok %ld value %ld too_large %ld; jpeg ok %ld jpeg_error %ld "
           "fallback %ld value %ld too_large %ld; levels%s%s%s; index: tar plain %ld not_plain %ld, sizes ok %ld none %ld "
           "ask %ld; chunk reads ok %ld general %ld changed %ld\n",
           argv[1], iteration, calls[0][RC_OK], calls[0][RC_VALUE], calls[0][RC_TOO_LARGE], calls[1][RC_OK],
           calls[1][RC_JPEG], calls[1][RC_FALLBACK], calls[1][RC_VALUE], calls[1][RC_TOO_LARGE],
           levels_ok[0] ? " none" : "", levels_ok[1] ? " sse2" : "", levels_ok[2] ? " avx2" : "", walks[0], walks[1],
           sizes_seen[0], sizes_seen[1], sizes_seen[2], chunk_reads[TF_READ_OK], chunk_reads[TF_READ_GENERAL],
           chunk_reads[TF_READ_CHANGED]);
    return 0;
}
