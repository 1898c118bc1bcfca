/* JPEG bytes -> only the crop window decoded -> the resampler (see jpeg_window.h).
 *
 * Only what the filter reads is decoded: the columns through jpeg_crop_scanline (it
 * aligns the left edge to an iMCU; MARGIN extra columns keep the chroma upsampling of
 * the used columns identical to a full decode), the rows above through
 * jpeg_skip_scanlines, and decoding stops after the last row read
 * (jpeg_abort_decompress). Pixels are decoded as RGBX. With dct_scale the result equals
 * Pillow's resize of the half-size decode, not of the full one.
 *
 * Damage: with check, the entropy-coded data is checked whatever the crop. After the
 * last row the filter reads, the rest of the scan is consumed (finish_scan: Huffman
 * decoding only, no IDCT, down to the last row; that row read; then on to EOI), so
 * damage below the window is seen as well as damage above it (the rows above are always
 * entropy-decoded by jpeg_skip_scanlines). Callers check a sample until it is known
 * intact (the dataset index's verdict, tf_jpeg_check run on its build threads, or their
 * own first check: engine/checked.py), so it is good or bad in every epoch, not only
 * when its crop reaches the damage.
 *
 * Errors: libjpeg errors, and its warnings that mean damaged data (is_damage: in the
 * scan, or a premature end), are RC_JPEG with libjpeg's message. Warnings before the
 * first scan about the header (junk bytes before a marker, an unknown JFIF revision or
 * Adobe transform, a bad ICC chunk) are not damage: the pixels are intact, and such
 * images are decoded. Streams this decoder does not
 * handle (CMYK/YCCK, or bytes that do not end with an EOI marker, which may be
 * truncated in the part that is never decoded here) are RC_FALLBACK, for a general
 * decoder to judge. An image declaring more pixels than max_pixels is RC_TOO_LARGE from
 * its header, before anything its size is allocated or decoded: a 2 KB JPEG can declare
 * 60000 x 60000 pixels (10 GB to decode; a progressive one allocates that much in
 * jpeg_start_decompress).
 */
#include "jpeg_window.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include <jerror.h>
#include <jpeglib.h>

#include "layout.h"

#define MARGIN 2 /* extra columns decoded each side (see above) */

typedef char msg_fits_libjpeg[JMSG_LENGTH_MAX + 96 <= TF_MSG_LEN ? 1 : -1];

struct JpegWindow {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr err;
    jmp_buf jump;
    int created;
    int in_scan; /* past the header: set before jpeg_start_decompress (see is_damage) */
    Scratch scratch;
};

/* ---------------------------------------------------------------- errors */

static void on_error_exit(j_common_ptr c) {
    JpegWindow *j = (JpegWindow *)c->client_data;
    (*c->err->format_message)(c, j->scratch.msg);
    longjmp(j->jump, 1);
}

/* Whether the warning just raised means damaged pixels. The codes of libjpeg-turbo's
 * jerror.h: inside a scan (a bad code, a marker or the end of the data where the scan
 * goes on, lost restart markers), a broken progression, or bytes left over after a scan
 * (the entropy decoder lost step: a byte of the scan changed). Junk before a marker
 * while reading the header, an unknown JFIF revision or Adobe transform, a bad ICC
 * chunk: not damage. */
static int is_damage(const JpegWindow *j, int code) {
    switch (code) {
        case JWRN_EXTRANEOUS_DATA: return j->in_scan;
        case JWRN_ADOBE_XFORM:
        case JWRN_JFIF_MAJOR:
        case JWRN_BOGUS_ICC: return 0;
        default: return 1; /* JWRN_HIT_MARKER, JWRN_HUFF_BAD_CODE, JWRN_JPEG_EOF, ... */
    }
}

static void on_emit_message(j_common_ptr c, int level) {
    if (level < 0 && is_damage((JpegWindow *)c->client_data, c->err->msg_code)) on_error_exit(c);
}

static void on_output_message(j_common_ptr c) { (void)c; }

/* ---------------------------------------------------------------- lifetime */

static int create(JpegWindow *j) {
    if (setjmp(j->jump)) return 0; /* jpeg_create_decompress fails only without memory */
    jpeg_create_decompress(&j->cinfo);
    j->created = 1;
    return 1;
}

JpegWindow *tf_jpeg_new(void) {
    JpegWindow *j = (JpegWindow *)calloc(1, sizeof(JpegWindow));
    if (!j) return NULL;
    j->cinfo.err = jpeg_std_error(&j->err);
    j->err.error_exit = on_error_exit;
    j->err.emit_message = on_emit_message;
    j->err.output_message = on_output_message;
    j->cinfo.client_data = j; /* jpeg_create_decompress keeps err and client_data */
    if (!create(j)) {
        free(j);
        return NULL;
    }
    return j;
}

void tf_jpeg_free(JpegWindow *j) {
    if (!j) return;
    if (j->created) jpeg_destroy_decompress(&j->cinfo);
    tf_scratch_free(&j->scratch);
    free(j);
}

Scratch *tf_jpeg_scratch(JpegWindow *j) { return &j->scratch; }

const char *tf_jpeg_version(void) {
#define TF_STR2(x) #x
#define TF_STR(x) TF_STR2(x)
#ifdef LIBJPEG_TURBO_VERSION
    return TF_STR(LIBJPEG_TURBO_VERSION);
#else
    return "";
#endif
}

/* ---------------------------------------------------------------- the JPEG as a Source */

typedef struct {
    Source base;
    struct jpeg_decompress_struct *ci;
} JpegSource;

/* Start decoding only the columns around [lo, hi) (see above). */
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

/* ---------------------------------------------------------------- decode */

/* Consume the rest of the scan after the rows a caller read: skip to the last row
 * (skipping whole iMCU rows only entropy-decodes them; skipping to the very end would
 * decode nothing, so one row is left), read it, then read on to EOI, where bytes the
 * scan did not use are reported (JWRN_EXTRANEOUS_DATA). libjpeg's errors and damage
 * warnings longjmp to the caller's READ_HEADER frame. */
static void finish_scan(struct jpeg_decompress_struct *ci) {
    if (ci->output_scanline + 1 < ci->output_height)
        jpeg_skip_scanlines(ci, ci->output_height - 1 - ci->output_scanline);
    if (ci->output_scanline < ci->output_height) {
        JSAMPARRAY row = (*ci->mem->alloc_sarray)((j_common_ptr)ci, JPOOL_IMAGE,
                                                  ci->output_width * (JDIMENSION)ci->output_components, 1);
        while (ci->output_scanline < ci->output_height) jpeg_read_scanlines(ci, row, 1);
    }
    jpeg_finish_decompress(ci);
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
#define READ_HEADER(j, s, ci, data, len)                                                                     \
    do {                                                                                                     \
        (s)->msg[0] = 0;                                                                                     \
        (j)->in_scan = 0;                                                                                    \
        if ((len) < 4 || (data)[0] != 0xFF || (data)[1] != 0xD8) {                                           \
            snprintf((s)->msg, sizeof(s)->msg, (len) ? "not a JPEG (no SOI marker)" : "empty file (0 bytes)"); \
            return RC_VALUE;                                                                                 \
        }                                                                                                    \
        if (setjmp((j)->jump)) {                                                                             \
            jpeg_abort_decompress(ci);                                                                       \
            return RC_JPEG;                                                                                  \
        }                                                                                                    \
        jpeg_mem_src((ci), (data), (unsigned long)(len));                                                    \
        jpeg_read_header((ci), TRUE);                                                                        \
    } while (0)

/* libjpeg's errors longjmp back here (READ_HEADER; tf_resample and the JpegSource
 * callbacks run inside this frame and hold nothing that a longjmp would leak). */
int tf_jpeg_crop_resize(JpegWindow *j, const unsigned char *data, size_t len, const double box[4], const Target *t,
                        int dct_scale, int check, long long max_pixels) {
    Scratch *s = &j->scratch;
    struct jpeg_decompress_struct *ci = &j->cinfo;
    READ_HEADER(j, s, ci, data, len);
    if (tf_check_size(s, ci->image_height, ci->image_width, max_pixels) != RC_OK) {
        jpeg_abort_decompress(ci);
        return RC_TOO_LARGE;
    }
    if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK)
        FAIL(RC_FALLBACK, "%s JPEG: not handled by the crop decoder",
             ci->jpeg_color_space == JCS_CMYK ? "CMYK" : "YCCK");
    if (!ends_with_eoi(data, len)) /* maybe truncated in a part never decoded here */
        FAIL(RC_FALLBACK, "JPEG does not end with an EOI marker");
    double b[4];
    int rc = tf_clamp_box(s, box, ci->image_width, ci->image_height, b);
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
    j->in_scan = 1;
    rc = tf_resample(s, &js.base, (int)ci->output_width, (int)ci->output_height, (float)(b[0] * f),
                     (float)(b[1] * f), (float)(b[2] * f), (float)(b[3] * f), t);
    if (rc == RC_OK && check) finish_scan(ci); /* damage below the window longjmps to READ_HEADER's frame */
    jpeg_abort_decompress(ci);
    return rc;
}

int tf_jpeg_check(JpegWindow *j, const unsigned char *data, size_t len, long long max_pixels) {
    Scratch *s = &j->scratch;
    struct jpeg_decompress_struct *ci = &j->cinfo;
    READ_HEADER(j, s, ci, data, len);
    if (tf_check_size(s, ci->image_height, ci->image_width, max_pixels) != RC_OK) {
        jpeg_abort_decompress(ci);
        return RC_TOO_LARGE;
    }
    /* The cheapest decode that still reads every entropy-coded bit: 1/8 scale (a DC-only
     * IDCT), one iMCU column wide, every row but the last skipped (finish_scan). */
    ci->scale_num = 1;
    ci->scale_denom = 8;
    ci->dct_method = JDCT_IFAST;
    j->in_scan = 1;
    jpeg_start_decompress(ci);
    JDIMENSION x = 0, w = 1;
    if (ci->output_width > 1) jpeg_crop_scanline(ci, &x, &w);
    finish_scan(ci);
    jpeg_abort_decompress(ci);
    return RC_OK;
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

int tf_jpeg_header(JpegWindow *j, const unsigned char *data, size_t len, int *h, int *w, const char **colorspace) {
    Scratch *s = &j->scratch;
    struct jpeg_decompress_struct *ci = &j->cinfo;
    READ_HEADER(j, s, ci, data, len);
    *h = (int)ci->image_height;
    *w = (int)ci->image_width;
    *colorspace = colorspace_name(ci->jpeg_color_space);
    jpeg_abort_decompress(ci);
    return RC_OK;
}
