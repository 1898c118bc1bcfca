/* The sizes of many JPEGs of one file from their headers, in one call without Python
 * (jpeg_sizes.c): what the dataset index records for aspect-ratio buckets. */
#ifndef TF_JPEG_SIZES_H
#define TF_JPEG_SIZES_H

#include <stddef.h>
#include <stdint.h>

/* Bytes read first, then once more when those hold no readable header (as
 * turbofeed.decode.probe.HEAD_BYTES and MORE_BYTES). */
#define TF_HEAD_BYTES (16 << 10)
#define TF_MORE_BYTES (256 << 10)

/* What tf_jpeg_sizes says of one image: its size (TF_SIZE_OK), no readable header
 * (TF_SIZE_NONE: height and width 0), or "ask the Python probe" (TF_SIZE_ASK: not a
 * JPEG, or a header whose verdict might differ between this libjpeg and simplejpeg's). */
enum { TF_SIZE_OK = 0, TF_SIZE_NONE = 1, TF_SIZE_ASK = 2 };

/* For each of n images (the members at offset[i], size[i] of the file open as fd):
 * out[3 * i] = height, out[3 * i + 1] = width, out[3 * i + 2] = TF_SIZE_*. Reads their
 * first TF_HEAD_BYTES, then TF_MORE_BYTES when those hold no readable header, through
 * one window (tarindex.h). Returns 0, or TF_IO (errno) / TF_NOMEM from tarindex.h. */
int tf_jpeg_sizes(int fd, const int64_t *offset, const int64_t *size, size_t n, int32_t *out);

#endif
