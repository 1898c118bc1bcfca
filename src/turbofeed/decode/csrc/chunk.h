/* A chunk of samples in two calls without the GIL (chunk.c): read every sample's bytes
 * from its shard into one buffer and read its JPEG header, then decode every sample's
 * crop window into its row of a batch slot. Python runs once per chunk around them
 * (turbofeed/engine/chunks.py), never per sample. No Python here. */
#ifndef TF_CHUNK_H
#define TF_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "jpeg_window.h"
#include "resample.h"

/* What tf_chunk_read says of a sample (its first int32; then height and width). */
enum {
    TF_READ_OK = 0,      /* bytes read, header read: a JPEG the crop decoder takes */
    TF_READ_GENERAL = 1, /* bytes read, but the general decoder must judge them (not a
                            JPEG, CMYK/YCCK, an unreadable header) */
    TF_READ_BAD = 2,     /* bytes read, bad data: over max_pixels, or a damaged scan where
                            checked (the per-sample path names the error) */
    TF_READ_CHANGED = 3, /* the file is not the indexed version any more (fstat after the read) */
    TF_READ_ERRNO = 4,   /* the read failed: the errno is in place of the height */
    TF_READ_SHORT = 5    /* fewer bytes than the index recorded (a lying file system) */
};

/* For each sample i < n: pread sizes[i] bytes at offsets[i] of fds[i] into buf + starts[i]
 * (fds[i] < 0: the bytes are there already), then fstat fds[i] and compare its (size,
 * mtime_ns, ctime_ns) with stamps[3i..3i+2] (bytes read before an unchanged fstat are
 * the indexed bytes: turbofeed/io/local/files.py), then read the JPEG header, refuse
 * more than max_pixels > 0 pixels and, where checks[i] (checks may be NULL: none), check
 * the whole scan (tf_jpeg_check). Writes (status, height, width) to head[3i..3i+2]. */
void tf_chunk_read(JpegWindow *j, size_t n, const int32_t *fds, const int64_t *offsets, const int64_t *sizes,
                   const int64_t *stamps, unsigned char *buf, const int64_t *starts, const uint8_t *checks,
                   long long max_pixels, int32_t *head);

/* For each sample i < n: tf_jpeg_crop_resize of buf[starts[i] : starts[i] + sizes[i]] with
 * box boxes[4i..4i+3], mirrored when flips[i], its whole scan checked when checks[i], into
 * out + rows[i] * row_bytes (the target's size, layout and normalisation from base).
 * status[i] is its RC_ code. emulate_ns > 0 replaces each decode by a wait of that many
 * nanoseconds (bench/emulated_cores.py: each thread then acts as one more core). */
void tf_chunk_decode(JpegWindow *j, size_t n, const unsigned char *buf, const int64_t *starts, const int64_t *sizes,
                     const double *boxes, const uint8_t *flips, const uint8_t *checks, const int64_t *rows,
                     unsigned char *out, size_t row_bytes, const Target *base, long long max_pixels,
                     long long emulate_ns, int32_t *status);

#endif
