/* Decode only the window of a JPEG that a resize box needs (jpeg_window.c), with
 * libjpeg-turbo, into the resampler. No Python. */
#ifndef TF_JPEG_WINDOW_H
#define TF_JPEG_WINDOW_H

#include <stddef.h>

#include "resample.h"

/* A libjpeg decompressor, its error handling and a Scratch: one per thread. */
typedef struct JpegWindow JpegWindow;

JpegWindow *tf_jpeg_new(void); /* NULL without memory */
void tf_jpeg_free(JpegWindow *j);
Scratch *tf_jpeg_scratch(JpegWindow *j); /* its message, the size of an image over the limit, buffers */

/* Decode the part of the JPEG in data[0:len] that box (x0, y0, x1, y1; source pixels,
 * clamped to the image) needs and resize it into the target. With dct_scale, decode at
 * half size (libjpeg-turbo's 1/2 IDCT) when the box is at least twice the output in
 * both axes. With check, the whole scan is checked, whatever the box (jpeg_window.c);
 * without, only the rows up to the box's last. Returns RC_OK,
 * RC_VALUE (not a JPEG, empty box), RC_JPEG (libjpeg's errors, damaged entropy-coded
 * data: not header warnings such as junk before a marker), RC_FALLBACK (CMYK/YCCK, or no EOI marker at the end),
 * RC_TOO_LARGE (more than max_pixels > 0 pixels, from the header), RC_NOMEM. */
int tf_jpeg_crop_resize(JpegWindow *j, const unsigned char *data, size_t len, const double box[4], const Target *t,
                        int dct_scale, int check, long long max_pixels);

/* Check the entropy-coded data of the JPEG in data[0:len] without decoding pixels (every
 * bit is Huffman-decoded; a 1/8-scale IDCT of one column): RC_OK when intact, RC_JPEG
 * (damage, libjpeg's message), RC_VALUE (not a JPEG), RC_TOO_LARGE (over max_pixels > 0,
 * from the header, before anything is allocated), RC_NOMEM. */
int tf_jpeg_check(JpegWindow *j, const unsigned char *data, size_t len, long long max_pixels);

/* Height, width and colour space ("gray", "rgb", "ycbcr", "cmyk", "ycck", "unknown")
 * from the header: RC_OK, RC_VALUE or RC_JPEG. */
int tf_jpeg_header(JpegWindow *j, const unsigned char *data, size_t len, int *h, int *w, const char **colorspace);

const char *tf_jpeg_version(void); /* LIBJPEG_TURBO_VERSION of the headers built against, or "" */

#endif
