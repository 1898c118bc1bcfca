/* A chunk of samples in one call without the GIL (chunk.c): every sample's bytes read
 * from its shard (into one buffer, tf_chunk_read and tf_chunk_read_at: the GPU path), or read, its window
 * chosen and decoded into its row of a batch slot (tf_chunk_run: the CPU path). Python
 * runs once per chunk around them (turbofeed/engine/chunks.py), never per sample. */
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

/* For each sample i < n: pread sizes[i] bytes at offsets[i] of fds[i] into buf + starts[i],
 * then fstat fds[i] and compare its (size,
 * mtime_ns, ctime_ns) with stamps[3i..3i+2] (bytes read before an unchanged fstat are
 * the indexed bytes: turbofeed/io/local/files.py), then read the JPEG header, refuse
 * more than max_pixels > 0 pixels and, where checks[i] (checks may be NULL: none), check
 * the whole scan (tf_jpeg_check). Writes (status, height, width) to head[3i..3i+2]. */
void tf_chunk_read(JpegWindow *j, size_t n, const int32_t *fds, const int64_t *offsets, const int64_t *sizes,
                   const int64_t *stamps, unsigned char *buf, const int64_t *starts, const uint8_t *checks,
                   long long max_pixels, int32_t *head);

/* What tf_chunk_run says of a sample: decoded into its row; for the per-sample path (not
 * a JPEG the crop decoder takes, a window of another size than the rows, damage, over
 * max_pixels); no memory; or TF_READ_CHANGED, TF_READ_ERRNO, TF_READ_SHORT. */
enum { TF_RUN_OK = 0, TF_RUN_GENERAL = 1, TF_RUN_NOMEM = 2 };

/* The whole CPU path of a chunk in one call: for each sample i, read it as tf_chunk_read
 * does (into a buffer of this call), choose its window (tf_windows: prog, epoch_key,
 * gids[i] and the header's size), and where the window's size is the target's, decode it
 * with tf_jpeg_crop_resize into out + rows[i] * row_bytes (mirrored as the window says,
 * its whole scan checked where checks[i]; emulate_ns > 0 replaces each decode by
 * emulate_ns nanoseconds of waiting, all in one wait at the end, since a wait costs CPU
 * time too: bench/emulated_cores.py). status[2i] is its TF_RUN_ or
 * TF_READ_ code, status[2i + 1] the errno of a failed read. Returns the nanoseconds spent
 * reading (the rest decoding), or -1 without memory for the read buffer. */
long long tf_chunk_run(JpegWindow *j, size_t n, const int32_t *fds, const int64_t *offsets, const int64_t *sizes,
                       const int64_t *stamps, const int64_t *gids, const uint8_t *checks, const int64_t *rows,
                       const double *prog, uint64_t epoch_key, unsigned char *out, size_t row_bytes,
                       const Target *base, long long max_pixels, long long emulate_ns, int32_t *status);

/* What tf_chunk_run_at says of a sample whose shard has no descriptor yet: the caller
 * opens it and runs the sample again (turbofeed/io/local/ranges.py opens on first use). */
enum { TF_RUN_UNOPENED = 6 };

/* Where a chunk's samples come from and where their results go: the pass's plan and the
 * dataset's arrays by sample id, so that the chunk's bookkeeping (ids from the order, the
 * reads' descriptors, offsets, sizes and stamps, the checked flags, the labels) is done
 * here too and Python runs once per chunk, a fixed number of operations
 * (turbofeed/engine/chunks.py). Row i of the chunk is sample order[first + i * step] and
 * goes to row row0 + i of the batch. The ids (by sample id) index readable, source,
 * offsets, sizes, checked and labels (num_ids entries); source indexes fds and stamps
 * (3 per source; num_sources entries). */
typedef struct {
    const int64_t *order;
    int64_t first, step, row0;
    int64_t num_ids, num_sources;
    const uint8_t *readable; /* the sample's image is a byte range of a local file */
    const int32_t *source;
    const int32_t *fds; /* -1: not open yet (TF_RUN_UNOPENED) */
    const int64_t *offsets, *sizes, *stamps;
    uint8_t *checked; /* set to 1 once decoded (or read: tf_chunk_read_at) with its whole scan
                         checked, or checked before */
    const int64_t *labels;
    int64_t *labels_out, *ids_out; /* the batch's, by row: written for the rows decoded */
} ChunkPlan;

/* tf_chunk_run for the n rows of p, gathered here: rows not readable are
 * TF_RUN_GENERAL, rows whose shard is not open TF_RUN_UNOPENED, untouched; a decoded
 * row gets its label and id, and its sample is marked checked (a flag only ever set, by
 * any thread: the same value whoever writes it). *nbytes is the encoded bytes read.
 * Returns the nanoseconds spent reading, or -1 without memory. */
long long tf_chunk_run_at(JpegWindow *j, size_t n, const ChunkPlan *p, const double *prog, uint64_t epoch_key,
                          unsigned char *out, size_t row_bytes, const Target *base, long long max_pixels,
                          long long emulate_ns, int32_t *status, int64_t *nbytes);

/* The GPU path's read of a chunk from its plan (tf_chunk_read_at), in two steps: first
 * where each of p's n rows goes in one buffer, place[3i..3i+2] = (sample id, start,
 * size): the rows readable by range one after another in row order, their shard open or
 * not (a row whose shard is not open keeps its place, for the caller to read it there
 * once it opened the shard), the others size 0. Returns the total: the buffer's size.
 * Reads nothing (cheap: the caller runs it holding the GIL, to size the buffer). */
int64_t tf_chunk_layout(size_t n, const ChunkPlan *p, int64_t *place);

/* Then tf_chunk_read of p's n rows into buf at place's starts: rows not readable
 * TF_READ_GENERAL (for the per-sample path), rows whose shard is not open (fds -1)
 * TF_RUN_UNOPENED (nothing read), the others as tf_chunk_read says of them, each one's
 * whole scan checked where its checked flag is 0, and its flag set where it is
 * TF_READ_OK (checked intact now, or before). head[3i..3i+2]: (status, height, width).
 * Only order, first, step, readable, source, fds, offsets, sizes, stamps and checked of
 * p are read. */
void tf_chunk_read_at(JpegWindow *j, size_t n, const ChunkPlan *p, const int64_t *place, unsigned char *buf,
                      long long max_pixels, int32_t *head);

/* The dataset index's scan checks (turbofeed/io/dsindex/parts.py), what tf_scan_checks
 * says of an image: not checked (not a JPEG, over max_pixels, the file ends before its
 * end), its whole scan intact (tf_jpeg_check: what a loader's first check would say), or
 * damaged (libjpeg's error or damage warning). */
enum { TF_SCAN_UNKNOWN = 0, TF_SCAN_INTACT = 1, TF_SCAN_DAMAGED = 2 };
enum { TF_SCAN_NOMEM = -2 };

/* For each image i < n of the file open as fd (sizes[i] bytes at offsets[i]): its first
 * two bytes read, and where they are a JPEG's SOI, all its bytes (one buffer of the
 * largest, reused), its whole scan checked with tf_jpeg_check (max_pixels > 0: images
 * over it are not checked); verdict[i] is a TF_SCAN_ code. Returns 0, TF_SCAN_NOMEM, or
 * -1 with errno set (a read failed). */
int tf_scan_checks(JpegWindow *j, int fd, const int64_t *offsets, const int64_t *sizes, size_t n,
                   long long max_pixels, uint8_t *verdict);

#endif
