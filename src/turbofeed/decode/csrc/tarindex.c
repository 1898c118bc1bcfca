/* The tar header walk and the member reads of the dataset index (see tarindex.h).
 *
 * tf_tar_walk is turbofeed.io.local.tarscan.fast_members in C, check for check: it
 * answers for the same shards with the same members, and says "not plain" for every
 * other one (tests/io/local/test_tarscan_native.py runs both on the same files). */
#include "tarindex.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 512
/* Window sizes: a read that continues the window (what the walk does through small
 * members, whose headers fill every page) doubles the next one, up to LARGE: few
 * system calls. A read elsewhere (past a large member, whose bytes nobody here needs)
 * starts again at SMALL: little copied. A system call costs about as much as copying
 * a few KiB. */
#define LARGE (1 << 20)
#define SMALL (4 * 1024)

/* ---------------------------------------------------------------- window */

void tf_window_init(TfWindow *w, int fd) {
    memset(w, 0, sizeof *w);
    w->fd = fd;
}

void tf_window_free(TfWindow *w) {
    free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
}

/* pread until n bytes or the end of the file: the bytes read, or -1 (errno). */
static ssize_t pread_full(int fd, unsigned char *buf, size_t n, int64_t offset) {
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, buf + done, n - done, (off_t)(offset + (int64_t)done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

const unsigned char *tf_window_read(TfWindow *w, int64_t offset, size_t n, size_t *got, int *rc) {
    int64_t rel = offset - w->start;
    if (w->buf == NULL || rel < 0 || (uint64_t)rel + n > w->len) {
        const int next = w->buf != NULL && rel >= 0 && (uint64_t)rel <= w->len;
        w->chunk = next && w->chunk ? (w->chunk < LARGE ? w->chunk * 2 : LARGE) : SMALL;
        size_t want = w->chunk;
        if (want < n) want = n;
        if (want > w->cap) {
            unsigned char *grown = (unsigned char *)realloc(w->buf, want);
            if (!grown) {
                *rc = TF_NOMEM;
                return NULL;
            }
            w->buf = grown;
            w->cap = want;
        }
        ssize_t r = pread_full(w->fd, w->buf, want, offset);
        if (r < 0) {
            w->len = 0;
            *rc = TF_IO;
            return NULL;
        }
        w->start = offset;
        w->len = (size_t)r;
        rel = 0;
    }
    size_t left = w->len - (size_t)rel;
    *got = n < left ? n : left;
    *rc = TF_TAR_PLAIN;
    return w->buf + rel;
}

/* ---------------------------------------------------------------- header checks */

/* The numeric fields tarfile parses (mode, uid, gid, size, mtime, chksum, devmajor,
 * devminor), [start, end). */
static const int NUMERIC[8][2] = {{100, 108}, {108, 116}, {116, 124}, {124, 136},
                                  {136, 148}, {148, 156}, {329, 337}, {337, 345}};

static int is_octal(unsigned char c) { return c >= '0' && c <= '7'; }

/* A field of only octal digits, spaces and NULs, without a space between two digits
 * (what int(text.strip(), 8) reads the same in every parser). */
static int field_ok(const unsigned char *f, int n) {
    int digit_then_space = 0;
    for (int i = 0; i < n; i++) {
        const unsigned char c = f[i];
        if (is_octal(c)) {
            if (digit_then_space == 2) return 0;
            digit_then_space = 1;
        } else if (c == ' ') {
            if (digit_then_space) digit_then_space = 2;
        } else if (c == 0) {
            digit_then_space = 0;
        } else {
            return 0;
        }
    }
    return 1;
}

/* The value of the digits before a field's first NUL (spaces skipped), and whether
 * there are any: int(text, 8) of the text before the NUL, for a field field_ok passed. */
static int64_t octal_value(const unsigned char *f, int n, int *digits) {
    int64_t v = 0;
    *digits = 0;
    for (int i = 0; i < n && f[i]; i++) {
        if (is_octal(f[i])) {
            v = v * 8 + (f[i] - '0');
            *digits = 1;
        }
    }
    return v;
}

/* Every numeric field well formed and the checksum right (unsigned or signed, as
 * tarfile accepts). */
static int header_ok(const unsigned char *b) {
    for (int k = 0; k < 8; k++)
        if (!field_ok(b + NUMERIC[k][0], NUMERIC[k][1] - NUMERIC[k][0])) return 0;
    int digits;
    const int64_t stored = octal_value(b + 148, 8, &digits);
    int64_t sum_unsigned = 256, sum_signed = 256; /* the checksum field counted as 8 spaces */
    for (int i = 0; i < BLOCK; i++) {
        if (i >= 148 && i < 156) continue;
        sum_unsigned += b[i];
        sum_signed += (signed char)b[i];
    }
    return stored == sum_unsigned || stored == sum_signed;
}

/* ---------------------------------------------------------------- members */

void tf_members_free(TfMembers *m) {
    free(m->names);
    free(m->name_end);
    free(m->offset);
    free(m->size);
    memset(m, 0, sizeof *m);
}

static int push_bytes(TfMembers *m, const unsigned char *p, size_t n) {
    if (m->names_len + n > m->names_cap) {
        size_t cap = m->names_cap ? m->names_cap * 2 : 1 << 16;
        while (cap < m->names_len + n) cap *= 2;
        unsigned char *grown = (unsigned char *)realloc(m->names, cap);
        if (!grown) return -1;
        m->names = grown;
        m->names_cap = cap;
    }
    memcpy(m->names + m->names_len, p, n);
    m->names_len += n;
    return 0;
}

static int push_member(TfMembers *m, int64_t offset, int64_t size) {
    if (m->count == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        int64_t *e = (int64_t *)realloc(m->name_end, cap * sizeof *e);
        if (e) m->name_end = e;
        int64_t *o = e ? (int64_t *)realloc(m->offset, cap * sizeof *o) : NULL;
        if (o) m->offset = o;
        int64_t *s = o ? (int64_t *)realloc(m->size, cap * sizeof *s) : NULL;
        if (!s) return -1;
        m->size = s;
        m->cap = cap;
    }
    m->name_end[m->count] = (int64_t)m->names_len;
    m->offset[m->count] = offset;
    m->size[m->count] = size;
    m->count++;
    return 0;
}

static size_t nts_len(const unsigned char *f, size_t n) {
    const unsigned char *nul = (const unsigned char *)memchr(f, 0, n);
    return nul ? (size_t)(nul - f) : n;
}

static int all_zero(const unsigned char *b) {
    for (int i = 0; i < BLOCK; i++)
        if (b[i]) return 0;
    return 1;
}

static int walk(TfWindow *w, int64_t file_size, TfMembers *out) {
    int64_t pos = 0;
    for (;;) {
        if (pos + BLOCK > file_size) return TF_TAR_NOT_PLAIN; /* cut short, or no end marker */
        size_t got;
        int rc;
        const unsigned char *b = tf_window_read(w, pos, BLOCK, &got, &rc);
        if (!b) return rc;
        if (got < BLOCK) return TF_TAR_NOT_PLAIN; /* the file shrank: tarfile decides */
        if (all_zero(b)) return TF_TAR_PLAIN;    /* the end-of-archive marker */
        if (!header_ok(b)) return TF_TAR_NOT_PLAIN;
        const unsigned char kind = b[156];
        int digits;
        const int64_t size = octal_value(b + 124, 12, &digits);
        if (!digits && b[124] != 0) return TF_TAR_NOT_PLAIN; /* spaces only: int() refuses it */
        if (kind == '5') { /* a directory */
            pos += BLOCK;
            continue;
        }
        if (kind != '0' && kind != 0) return TF_TAR_NOT_PLAIN; /* pax, GNU long names, links ... */
        const size_t name_len = nts_len(b, 100);
        if (kind == 0 && name_len > 0 && b[name_len - 1] == '/') { /* a v7 directory */
            pos += BLOCK;
            continue;
        }
        if (b[345] && (push_bytes(out, b + 345, nts_len(b + 345, 155)) < 0 ||
                       push_bytes(out, (const unsigned char *)"/", 1) < 0)) /* prefix "/" name */
            return TF_NOMEM;
        if (push_bytes(out, b, name_len) < 0) return TF_NOMEM;
        const int64_t end = pos + BLOCK + size;
        if (end > file_size) return TF_TAR_NOT_PLAIN;
        if (push_member(out, pos + BLOCK, size) < 0) return TF_NOMEM;
        pos = end + ((BLOCK - size % BLOCK) % BLOCK);
    }
}

int tf_tar_walk(int fd, int64_t file_size, TfMembers *out) {
    TfWindow w;
    tf_window_init(&w, fd);
    memset(out, 0, sizeof *out);
    const int rc = walk(&w, file_size, out);
    tf_window_free(&w);
    if (rc != TF_TAR_PLAIN) tf_members_free(out);
    return rc;
}

int tf_gather(int fd, const int64_t *offset, const int64_t *size, size_t n, unsigned char *out) {
    TfWindow w;
    tf_window_init(&w, fd);
    int rc = TF_TAR_PLAIN;
    for (size_t i = 0; i < n && rc == TF_TAR_PLAIN; i++) {
        size_t got;
        if (offset[i] < 0 || size[i] < 0) {
            errno = EINVAL;
            rc = TF_IO;
            break;
        }
        const unsigned char *p = tf_window_read(&w, offset[i], (size_t)size[i], &got, &rc);
        if (!p) break;
        if (got < (size_t)size[i]) {
            errno = ENODATA; /* the file is shorter than the member */
            rc = TF_IO;
            break;
        }
        memcpy(out, p, got);
        out += got;
    }
    tf_window_free(&w);
    return rc;
}
