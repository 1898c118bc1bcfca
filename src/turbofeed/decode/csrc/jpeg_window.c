/* JPEG bytes -> only the crop window decoded -> the resampler (see jpeg_window.h).
 *
 * Only what the filter reads is decoded: the columns through jpeg_crop_scanline (it
 * aligns the left edge to an iMCU; MARGIN extra columns keep the chroma upsampling of
 * the used columns identical to a full decode), the rows above through
 * jpeg_skip_scanlines, and decoding stops after the last row read
 * (jpeg_abort_decompress). Pixels are decoded as RGBX. With dct_scale the result equals
 * Pillow's resize of the half-size decode, not of the full one.
 *
 * Errors: libjpeg errors and warnings about corrupt data are RC_JPEG with libjpeg's
 * message (strict, like simplejpeg's strict=True). Streams this decoder does not
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
    Scratch scratch;
};

/* ---------------------------------------------------------------- errors */

static void on_error_exit(j_common_ptr c) {
    JpegWindow *j = (JpegWindow *)c->client_data;
    (*c->err->format_message)(c, j->scratch.msg);
    longjmp(j->jump, 1);
}

static void on_emit_message(j_common_ptr c, int level) {
    if (level < 0) { /* a warning: corrupt data. Strict: an error. */
        on_error_exit(c);
    }
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
                        int dct_scale, long long max_pixels) {
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
    rc = tf_resample(s, &js.base, (int)ci->output_width, (int)ci->output_height, (float)(b[0] * f),
                     (float)(b[1] * f), (float)(b[2] * f), (float)(b[3] * f), t);
    jpeg_abort_decompress(ci); /* the rest of the image is never decoded */
    return rc;
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
