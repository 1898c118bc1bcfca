/* A chunk of samples without the GIL: reads and headers (from the chunk's plan too),
 * then crop-window decodes into slot rows; and the dataset index's scan checks of a
 * shard's JPEGs (chunk.h). */
#include "chunk.h"

#include "windows.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* pread until size bytes or the end of the file; the count read, or -1 (errno set). */
static int64_t read_full(int fd, unsigned char *dst, int64_t size, int64_t offset) {
    int64_t done = 0;
    while (done < size) {
        const ssize_t got = pread(fd, dst + done, (size_t)(size - done), (off_t)(offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (got == 0) break;
        done += got;
    }
    return done;
}

static int32_t read_one(JpegWindow *j, int fd, int64_t offset, int64_t size, const int64_t *stamp,
                        unsigned char *dst, int check, long long max_pixels, int32_t *hw) {
    const int64_t got = read_full(fd, dst, size, offset);
    if (got < 0) {
        hw[0] = errno;
        return TF_READ_ERRNO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        hw[0] = errno;
        return TF_READ_ERRNO;
    }
    const int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    const int64_t ctime = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
    if ((int64_t)st.st_size != stamp[0] || mtime != stamp[1] || ctime != stamp[2]) return TF_READ_CHANGED;
    if (got != size) return TF_READ_SHORT;
    int h = 0, w = 0;
    const char *cs = "unknown";
    if (tf_jpeg_header(j, dst, (size_t)size, &h, &w, &cs) != RC_OK) return TF_READ_GENERAL;
    if (strcmp(cs, "cmyk") == 0 || strcmp(cs, "ycck") == 0) return TF_READ_GENERAL;
    hw[0] = h;
    hw[1] = w;
    if (max_pixels > 0 && (long long)h * w > max_pixels) return TF_READ_BAD;
    if (check && tf_jpeg_check(j, dst, (size_t)size, max_pixels) != RC_OK) return TF_READ_BAD;
    return TF_READ_OK;
}

void tf_chunk_read(JpegWindow *j, size_t n, const int32_t *fds, const int64_t *offsets, const int64_t *sizes,
                   const int64_t *stamps, unsigned char *buf, const int64_t *starts, const uint8_t *checks,
                   long long max_pixels, int32_t *head) {
    for (size_t i = 0; i < n; i++) {
        int32_t *h = head + 3 * i;
        h[1] = h[2] = 0;
        h[0] = read_one(j, fds[i], offsets[i], sizes[i], stamps + 3 * i, buf + starts[i], checks && checks[i],
                        max_pixels, h + 1);
    }
}

int64_t tf_chunk_layout(size_t n, const ChunkPlan *p, int64_t *place) {
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t gid = p->order[p->first + (int64_t)i * p->step];
        const int64_t size = p->readable[gid] ? p->sizes[gid] : 0;
        place[3 * i] = gid;
        place[3 * i + 1] = total;
        place[3 * i + 2] = size;
        total += size;
    }
    return total;
}

void tf_chunk_read_at(JpegWindow *j, size_t n, const ChunkPlan *p, const int64_t *place, unsigned char *buf,
                      long long max_pixels, int32_t *head) {
    for (size_t i = 0; i < n; i++) {
        const int64_t gid = place[3 * i];
        int32_t *h = head + 3 * i;
        h[1] = h[2] = 0;
        if (!p->readable[gid]) {
            h[0] = TF_READ_GENERAL;
            continue;
        }
        const int32_t src = p->source[gid];
        const int32_t fd = p->fds[src]; /* read once: another thread may open the shard meanwhile */
        if (fd < 0) {
            h[0] = TF_RUN_UNOPENED;
            continue;
        }
        h[0] = read_one(j, fd, p->offsets[gid], place[3 * i + 2], p->stamps + 3 * (int64_t)src, buf + place[3 * i + 1],
                        !p->checked[gid], max_pixels, h + 1);
        if (h[0] == TF_READ_OK) p->checked[gid] = 1; /* only ever set, by any thread: the same value */
    }
}

int tf_scan_checks(JpegWindow *j, int fd, const int64_t *offsets, const int64_t *sizes, size_t n,
                   long long max_pixels, uint8_t *verdict) {
    unsigned char *buf = NULL, soi[2];
    int64_t held = 0;
    int rc = 0;
    memset(verdict, TF_SCAN_UNKNOWN, n);
    for (size_t i = 0; i < n; i++) {
        if (sizes[i] < 4) continue;
        int64_t got = read_full(fd, soi, 2, offsets[i]); /* not a JPEG: its bytes are not read */
        if (got < 0) {
            rc = -1;
            break;
        }
        if (got < 2 || soi[0] != 0xFF || soi[1] != 0xD8) continue;
        if (sizes[i] > held) {
            free(buf);
            buf = malloc((size_t)sizes[i]);
            held = buf ? sizes[i] : 0;
            if (!buf) {
                rc = TF_SCAN_NOMEM;
                break;
            }
        }
        got = read_full(fd, buf, sizes[i], offsets[i]);
        if (got < 0) {
            rc = -1;
            break;
        }
        if (got != sizes[i]) continue; /* the file ends first: loaders find it short */
        const int checked = tf_jpeg_check(j, buf, (size_t)sizes[i], max_pixels);
        verdict[i] = checked == RC_OK ? TF_SCAN_INTACT : checked == RC_JPEG ? TF_SCAN_DAMAGED : TF_SCAN_UNKNOWN;
    }
    const int saved = errno;
    free(buf);
    errno = saved;
    return rc;
}

static void wait_ns(long long ns) {
    struct timespec left = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000 + t.tv_nsec;
}

long long tf_chunk_run(JpegWindow *j, size_t n, const int32_t *fds, const int64_t *offsets, const int64_t *sizes,
                       const int64_t *stamps, const int64_t *gids, const uint8_t *checks, const int64_t *rows,
                       const double *prog, uint64_t epoch_key, unsigned char *out, size_t row_bytes,
                       const Target *base, long long max_pixels, long long emulate_ns, int32_t *status) {
    int64_t largest = 1;
    for (size_t i = 0; i < n; i++) largest = sizes[i] > largest ? sizes[i] : largest;
    unsigned char *buf = malloc((size_t)largest);
    if (!buf) return -1;
    long long reading = 0, waiting = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t *st = status + 2 * i;
        int32_t hw[2] = {0, 0};
        const long long t0 = now_ns();
        st[1] = 0;
        st[0] = read_one(j, fds[i], offsets[i], sizes[i], stamps + 3 * i, buf, 0, 0, hw);
        reading += now_ns() - t0;
        if (st[0] == TF_READ_ERRNO) st[1] = hw[0];
        if (st[0] != TF_READ_OK) {
            if (st[0] < TF_READ_CHANGED) st[0] = TF_RUN_GENERAL;
            continue;
        }
        double box[4];
        int64_t size[2];
        uint8_t flip;
        tf_windows(prog, epoch_key, 1, gids + i, hw, hw + 1, box, size, &flip);
        if (size[0] != base->out_h || size[1] != base->out_w) {
            st[0] = TF_RUN_GENERAL;
            continue;
        }
        Target t = *base;
        t.out = out + (size_t)rows[i] * row_bytes;
        t.flip = flip;
        if (emulate_ns > 0) { /* one wait for the chunk's decodes at the end: a wait costs CPU time too */
            waiting += emulate_ns;
            st[0] = TF_RUN_OK;
            continue;
        }
        const int rc = tf_jpeg_crop_resize(j, buf, (size_t)sizes[i], box, &t, 0, checks[i] != 0, max_pixels);
        st[0] = rc == RC_OK ? TF_RUN_OK : rc == RC_NOMEM ? TF_RUN_NOMEM : TF_RUN_GENERAL;
    }
    free(buf);
    if (waiting > 0) wait_ns(waiting);
    return reading;
}

long long tf_chunk_run_at(JpegWindow *j, size_t n, const ChunkPlan *p, const double *prog, uint64_t epoch_key,
                          unsigned char *out, size_t row_bytes, const Target *base, long long max_pixels,
                          long long emulate_ns, int32_t *status, int64_t *nbytes) {
    /* the rows taken, gathered into the arrays tf_chunk_run reads: one allocation, the
     * int64 arrays first (8 per row), then the int32 (3 per row), then the flags */
    const size_t m = n ? n : 1;
    unsigned char *block = calloc(m, 8 * sizeof(int64_t) + 3 * sizeof(int32_t) + 1);
    if (!block) return -1;
    int64_t *offsets = (int64_t *)block, *sizes = offsets + m, *stamps = sizes + m, *gids = stamps + 3 * m,
            *rows = gids + m, *taken = rows + m;
    int32_t *fds = (int32_t *)(taken + m), *codes = fds + m; /* codes: 2 per taken row */
    uint8_t *checks = (uint8_t *)(codes + 2 * m);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t gid = p->order[p->first + (int64_t)i * p->step];
        int32_t *st = status + 2 * i;
        st[1] = 0;
        if (!p->readable[gid]) {
            st[0] = TF_RUN_GENERAL;
            continue;
        }
        const int32_t src = p->source[gid];
        const int32_t fd = p->fds[src];
        if (fd < 0) {
            st[0] = TF_RUN_UNOPENED;
            continue;
        }
        fds[k] = fd;
        offsets[k] = p->offsets[gid];
        sizes[k] = p->sizes[gid];
        memcpy(stamps + 3 * k, p->stamps + 3 * (int64_t)src, 3 * sizeof(int64_t));
        gids[k] = gid;
        checks[k] = !p->checked[gid];
        rows[k] = p->row0 + (int64_t)i;
        taken[k] = (int64_t)i;
        k++;
    }
    const long long reading = tf_chunk_run(j, k, fds, offsets, sizes, stamps, gids, checks, rows, prog, epoch_key,
                                           out, row_bytes, base, max_pixels, emulate_ns, codes);
    int64_t read = 0;
    for (size_t t = 0; reading >= 0 && t < k; t++) {
        int32_t *st = status + 2 * taken[t];
        st[0] = codes[2 * t];
        st[1] = codes[2 * t + 1];
        if (st[0] < TF_READ_CHANGED) read += sizes[t]; /* read whole, decoded or not */
        if (st[0] != TF_RUN_OK) continue;
        p->labels_out[rows[t]] = p->labels[gids[t]];
        p->ids_out[rows[t]] = gids[t];
        p->checked[gids[t]] = 1;
    }
    free(block);
    *nbytes = read;
    return reading;
}
