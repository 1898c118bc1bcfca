/* The sizes of many JPEGs from their headers (see jpeg_sizes.h), for the dataset index.
 *
 * The index records what turbofeed.decode.probe.header_size says, which asks simplejpeg
 * (its own libjpeg-turbo, 3.x, through TurboJPEG, strict: a warning is a failure). This
 * file reads the header with the libjpeg-turbo the extension links (2.x here) and
 * answers only where both must agree; elsewhere it says TF_SIZE_ASK and the Python probe
 * decides (tests/decode/test_jpeg_sizes_native.py compares the two on many variants):
 *
 * - a header read without error or warning, of one component (gray), or of three
 *   (YCbCr or RGB) in one of TurboJPEG's usual subsamplings (4:4:4, 4:2:2, 4:2:0, 4:4:0,
 *   4:1:1): its size. Other layouts (CMYK/YCCK, 4:4:1, odd sampling factors), which
 *   TurboJPEG may refuse ("could not determine subsampling"): ask.
 * - a warning (junk before a marker, a premature end of the bytes read...): none, as
 *   simplejpeg's strict mode says.
 * - an error about the structure of the stream (no image before its end, a bad marker
 *   length, an unknown marker, bad table indexes...), which both versions raise alike:
 *   none. Any other error (a 12-bit or lossless frame, which only libjpeg-turbo 3 reads):
 *   ask.
 */
#include "jpeg_sizes.h"

#include <setjmp.h>
#include <stdio.h>

#include <jerror.h>
#include <jpeglib.h>

#include "tarindex.h"

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int warned;
} ProbeError;

static void probe_error_exit(j_common_ptr c) { longjmp(((ProbeError *)c->err)->jump, 1); }

static void probe_emit_message(j_common_ptr c, int level) {
    if (level < 0) ((ProbeError *)c->err)->warned = 1;
}

static void probe_output_message(j_common_ptr c) { (void)c; }

/* libjpeg errors about the stream's structure, raised alike by every libjpeg-turbo. */
static int structural(int code) {
    switch (code) {
        case JERR_NO_IMAGE:
        case JERR_NO_SOI:
        case JERR_BAD_LENGTH:
        case JERR_UNKNOWN_MARKER:
        case JERR_SOI_DUPLICATE:
        case JERR_SOF_DUPLICATE:
        case JERR_SOF_NO_SOS:
        case JERR_SOS_NO_SOF:
        case JERR_EMPTY_IMAGE:
        case JERR_COMPONENT_COUNT:
        case JERR_BAD_COMPONENT_ID:
        case JERR_BAD_HUFF_TABLE:
        case JERR_DHT_INDEX:
        case JERR_DQT_INDEX:
        case JERR_DAC_INDEX:
        case JERR_DAC_VALUE:
        case JERR_BAD_SAMPLING:
        case JERR_IMAGE_TOO_BIG:
        case JERR_INPUT_EMPTY: return 1;
        default: return 0;
    }
}

/* Gray, or three components in one of TurboJPEG's usual subsamplings. */
static int usual_layout(const struct jpeg_decompress_struct *ci) {
    if (ci->num_components == 1) return 1;
    if (ci->num_components != 3 || (ci->jpeg_color_space != JCS_YCbCr && ci->jpeg_color_space != JCS_RGB))
        return 0;
    const jpeg_component_info *c = ci->comp_info;
    for (int k = 1; k < 3; k++)
        if (c[k].h_samp_factor != 1 || c[k].v_samp_factor != 1) return 0;
    const int h = c[0].h_samp_factor, v = c[0].v_samp_factor;
    return (v == 1 && (h == 1 || h == 2 || h == 4)) || (v == 2 && (h == 1 || h == 2));
}

/* One header: TF_SIZE_* (the size in *h, *w when TF_SIZE_OK). libjpeg's errors
 * longjmp back into this frame, which then only aborts the decompressor. */
static int read_size(struct jpeg_decompress_struct *ci, ProbeError *e, const unsigned char *data, size_t len,
                     int32_t *h, int32_t *w) {
    e->warned = 0;
    if (setjmp(e->jump)) {
        jpeg_abort_decompress(ci);
        return e->warned || structural(e->pub.msg_code) ? TF_SIZE_NONE : TF_SIZE_ASK;
    }
    jpeg_mem_src(ci, data, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    int rc = TF_SIZE_ASK;
    if (e->warned) {
        rc = TF_SIZE_NONE;
    } else if (usual_layout(ci)) {
        *h = (int32_t)ci->image_height;
        *w = (int32_t)ci->image_width;
        rc = TF_SIZE_OK;
    }
    jpeg_abort_decompress(ci);
    return rc;
}

static int is_jpeg(const unsigned char *p, size_t n) { return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF; }

static int sizes(struct jpeg_decompress_struct *ci, ProbeError *e, TfWindow *w, const int64_t *offset,
                 const int64_t *size, size_t n, int32_t *out) {
    for (size_t i = 0; i < n; i++) {
        int32_t *o = out + 3 * i;
        o[0] = o[1] = 0;
        o[2] = TF_SIZE_ASK;
        if (offset[i] < 0 || size[i] < 0) continue;
        size_t got, first = size[i] < TF_HEAD_BYTES ? (size_t)size[i] : TF_HEAD_BYTES;
        int rc;
        const unsigned char *p = tf_window_read(w, offset[i], first, &got, &rc);
        if (!p) return rc;
        if (!is_jpeg(p, got)) continue; /* not a JPEG: the Python probe knows the others */
        int verdict = read_size(ci, e, p, got, &o[0], &o[1]);
        if (verdict == TF_SIZE_NONE && (int64_t)first < size[i]) { /* a header after a large EXIF or ICC? */
            const size_t more = size[i] < TF_MORE_BYTES ? (size_t)size[i] : TF_MORE_BYTES;
            p = tf_window_read(w, offset[i], more, &got, &rc);
            if (!p) return rc;
            verdict = read_size(ci, e, p, got, &o[0], &o[1]);
        }
        if (verdict != TF_SIZE_OK) o[0] = o[1] = 0;
        o[2] = verdict;
    }
    return 0;
}

int tf_jpeg_sizes(int fd, const int64_t *offset, const int64_t *size, size_t n, int32_t *out) {
    struct jpeg_decompress_struct ci;
    ProbeError e;
    ci.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = probe_error_exit;
    e.pub.emit_message = probe_emit_message;
    e.pub.output_message = probe_output_message;
    if (setjmp(e.jump)) return TF_NOMEM; /* jpeg_create_decompress fails only without memory */
    jpeg_create_decompress(&ci);
    TfWindow w;
    tf_window_init(&w, fd);
    const int rc = sizes(&ci, &e, &w, offset, size, n, out);
    tf_window_free(&w);
    jpeg_destroy_decompress(&ci);
    return rc;
}
