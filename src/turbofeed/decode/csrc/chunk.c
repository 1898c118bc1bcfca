/* A chunk of samples without the GIL: reads and headers, then crop-window decodes into
 * slot rows (chunk.h). */
#include "chunk.h"

#include <errno.h>
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
    if (fd >= 0) {
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
    }
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

static void wait_ns(long long ns) {
    struct timespec left = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

void tf_chunk_decode(JpegWindow *j, size_t n, const unsigned char *buf, const int64_t *starts, const int64_t *sizes,
                     const double *boxes, const uint8_t *flips, const uint8_t *checks, const int64_t *rows,
                     unsigned char *out, size_t row_bytes, const Target *base, long long max_pixels,
                     long long emulate_ns, int32_t *status) {
    for (size_t i = 0; i < n; i++) {
        Target t = *base;
        t.out = out + (size_t)rows[i] * row_bytes;
        t.flip = flips[i] != 0;
        if (emulate_ns > 0) {
            wait_ns(emulate_ns);
            status[i] = RC_OK;
            continue;
        }
        status[i] = tf_jpeg_crop_resize(j, buf + starts[i], (size_t)sizes[i], boxes + 4 * i, &t, 0, checks[i] != 0,
                                        max_pixels);
    }
}
