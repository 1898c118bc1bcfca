/* The pure resampler (resample.c): a box of an image, its rows read from a Source, to
 * an output buffer, exactly like Pillow's BILINEAR resize with a box, flipped, channels
 * first or last, uint8 or normalised float32. No Python, no libjpeg: plain buffers, a
 * return code and a message. */
#ifndef TF_RESAMPLE_H
#define TF_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* Return codes. The message (Scratch.msg) says what happened; the bindings map the code
 * to an exception. */
enum {
    RC_OK = 0,
    RC_JPEG,      /* libjpeg's error */
    RC_FALLBACK,  /* a stream left to a general decoder (CMYK, no EOI) */
    RC_NOMEM,
    RC_VALUE,     /* bad arguments, not a JPEG */
    RC_TOO_LARGE  /* more pixels than max_pixels: Scratch.size holds the height and width */
};

#define TF_MSG_LEN 296 /* libjpeg's JMSG_LENGTH_MAX (200) + 96 */

/* A thread's buffers, reused across calls (zero-initialise it; tf_scratch_free ends it). */
typedef struct {
    char msg[TF_MSG_LEN];
    unsigned long long size[2];           /* height, width of an image over the limit */
    unsigned char *rows; size_t rows_cap; /* decoded rows */
    unsigned char *tmp; size_t tmp_cap;   /* mid, lines, T, O (Layout) */
    unsigned char *coef; size_t coef_cap; /* both directions' Coeffs */
    unsigned char *w; size_t w_cap;       /* one pixel's double weights */
} Scratch;

/* Where the result goes: out holds 3 * out_h * out_w items, CHW (chw) or HWC, uint8, or
 * float32 (pixel - offset[c]) * factor[c] when offset is not NULL; mirrored when flip. */
typedef struct {
    void *out;
    int out_h, out_w, flip, chw;
    const float *offset, *factor;
} Target;

/* Where the resampler gets its rows: a JPEG being decoded, or an array of pixels. Rows
 * come as RGBX (4 bytes a pixel) and cover the columns [xoff, xoff + width) that crop()
 * chose around the columns [lo, hi) the filter reads. Each returns an RC_ code. */
typedef struct Source Source;
struct Source {
    int (*crop)(Source *src, int lo, int hi, int *xoff, int *width);
    int (*skip)(Source *src, int rows);                    /* drop the rows above the first read */
    int (*read)(Source *src, unsigned char **rows, int n); /* the next n rows */
    Scratch *s;                                            /* for messages */
};

/* RC_TOO_LARGE (size in s->size) when h * w > max_pixels > 0, before anything
 * proportional to the image is allocated or decoded; else RC_OK. h, w < 2^32. */
int tf_check_size(Scratch *s, unsigned long long h, unsigned long long w, long long max_pixels);

/* Clamp the box to a W x H image into out (as turbofeed.transforms.resample does);
 * RC_VALUE when nothing is left. */
int tf_clamp_box(Scratch *s, const double box[4], double W, double H, double out[4]);

/* Resize the box (x0, y0, x1, y1), inside an IW x IH image, its rows read from src, into
 * the target. Reads only the rows and columns the filter needs, top to bottom, once. */
int tf_resample(Scratch *s, Source *src, int IW, int IH, float x0, float y0, float x1, float y1, const Target *t);

/* Resize the box of an H x W image of uint8 pixels (channels 1: gray, 3: RGB, or 4: RGBA,
 * alpha dropped; rows of W * channels bytes) into the target, box clamped. */
int tf_resize_array(Scratch *s, const uint8_t *pixels, int H, int W, int channels, const double box[4],
                    const Target *t, long long max_pixels);

void tf_scratch_trim(Scratch *s); /* free buffers grown past 32 MiB */
void tf_scratch_free(Scratch *s); /* free every buffer; s may be used again */

#endif
