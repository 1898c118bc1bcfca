/* The bindings of the dataset index's native reads (tarindex.c, jpeg_sizes.c, chunk.c) in
 * turbofeed.decode._crop: argument checks, the GIL released around the reads, results
 * as bytes (numpy.frombuffer makes arrays of them). Limited API only (module.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <string.h>

#include "chunk.h"
#include "jpeg_sizes.h"
#include "module.h"
#include "module_index.h"
#include "tarindex.h"

static int raise_io(int rc) {
    if (rc == TF_NOMEM) {
        PyErr_NoMemory();
    } else {
        PyErr_SetFromErrno(PyExc_OSError);
    }
    return -1;
}

/* An int64 buffer (tf_typed_buffer, module_chunk.c). */
static int int64s(PyObject *obj, const char *name, Py_buffer *view) { return tf_typed_buffer(obj, name, 'q', -1, view); }

/* offsets and sizes as two int64 buffers of one length (n items); 0 or -1 (nothing held). */
static int pairs(PyObject *offsets, PyObject *sizes, Py_buffer *o, Py_buffer *s, size_t *n) {
    if (int64s(offsets, "offsets", o) < 0) return -1;
    if (int64s(sizes, "sizes", s) < 0) {
        PyBuffer_Release(o);
        return -1;
    }
    if (o->len != s->len) {
        PyErr_SetString(PyExc_ValueError, "offsets and sizes differ in length");
        PyBuffer_Release(o);
        PyBuffer_Release(s);
        return -1;
    }
    *n = (size_t)(o->len / 8);
    return 0;
}

const char tf_tar_walk_doc[] =
    "tar_walk(fd, file_size) -> (names, name_end, offset, size) | None\n"
    "--\n\n"
    "The regular files of the plain, whole tar shard open as fd, or None when it is not\n"
    "plain and whole (exactly when turbofeed.io.local.tarscan.fast_members says None).\n"
    "names: their raw names one after another; name_end, offset, size: int64 arrays as\n"
    "bytes (name i is names[name_end[i-1]:name_end[i]]). Releases the GIL. Raises OSError.";

PyObject *tf_py_tar_walk(PyObject *self, PyObject *args) {
    int fd;
    long long file_size;
    TfMembers m;
    int rc;
    (void)self;
    if (!PyArg_ParseTuple(args, "iL:tar_walk", &fd, &file_size)) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tf_tar_walk(fd, (int64_t)file_size, &m);
    Py_END_ALLOW_THREADS
    if (rc == TF_TAR_NOT_PLAIN) Py_RETURN_NONE;
    if (rc != TF_TAR_PLAIN) {
        raise_io(rc);
        return NULL;
    }
    const Py_ssize_t count = (Py_ssize_t)m.count * 8;
#define TF_OR_EMPTY(p) ((p) ? (const char *)(p) : "") /* y# makes None of NULL: a shard without members */
    PyObject *out = Py_BuildValue("(y#y#y#y#)", TF_OR_EMPTY(m.names), (Py_ssize_t)m.names_len,
                                  TF_OR_EMPTY(m.name_end), count, TF_OR_EMPTY(m.offset), count,
                                  TF_OR_EMPTY(m.size), count);
#undef TF_OR_EMPTY
    tf_members_free(&m);
    return out;
}

const char tf_gather_doc[] =
    "gather(fd, offsets, sizes) -> bytes\n"
    "--\n\n"
    "The bytes of the members at offsets (sizes bytes each; int64 arrays) of the file\n"
    "open as fd, one after another, read through one window of positional reads.\n"
    "Releases the GIL. Raises OSError (a read failed, or the file ends before a member).";

PyObject *tf_py_gather(PyObject *self, PyObject *args) {
    int fd;
    PyObject *offsets, *sizes;
    Py_buffer o, s;
    size_t n;
    int rc;
    (void)self;
    if (!PyArg_ParseTuple(args, "iOO:gather", &fd, &offsets, &sizes)) return NULL;
    if (pairs(offsets, sizes, &o, &s, &n) < 0) return NULL;
    const int64_t *size = (const int64_t *)s.buf;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (size[i] < 0 || size[i] > PY_SSIZE_T_MAX - total) {
            PyErr_SetString(PyExc_ValueError, "sizes must be non-negative, their sum a size");
            PyBuffer_Release(&o);
            PyBuffer_Release(&s);
            return NULL;
        }
        total += size[i];
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) {
        PyBuffer_Release(&o);
        PyBuffer_Release(&s);
        return NULL;
    }
    unsigned char *dst = (unsigned char *)PyBytes_AsString(out);
    Py_BEGIN_ALLOW_THREADS
    rc = tf_gather(fd, (const int64_t *)o.buf, size, n, dst);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&o);
    PyBuffer_Release(&s);
    if (rc != TF_TAR_PLAIN) {
        Py_DECREF(out);
        raise_io(rc);
        return NULL;
    }
    return out;
}

const char tf_jpeg_sizes_doc[] =
    "jpeg_sizes(fd, offsets, sizes) -> bytes\n"
    "--\n\n"
    "(height, width, verdict) as int32 triples, one per image member at offsets (sizes\n"
    "bytes each; int64 arrays) of the file open as fd, from its JPEG header: verdict 0\n"
    "the size, 1 no readable header (0, 0), 2 not decided here (not a JPEG, or a header\n"
    "other libjpeg-turbo versions may judge otherwise: ask turbofeed.decode.probe).\n"
    "Releases the GIL. Raises OSError.";

PyObject *tf_py_jpeg_sizes(PyObject *self, PyObject *args) {
    int fd;
    PyObject *offsets, *sizes;
    Py_buffer o, s;
    size_t n;
    int rc;
    (void)self;
    if (!PyArg_ParseTuple(args, "iOO:jpeg_sizes", &fd, &offsets, &sizes)) return NULL;
    if (pairs(offsets, sizes, &o, &s, &n) < 0) return NULL;
    if (n > (size_t)(PY_SSIZE_T_MAX / 12)) {
        PyBuffer_Release(&o);
        PyBuffer_Release(&s);
        return PyErr_NoMemory();
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 12));
    if (!out) {
        PyBuffer_Release(&o);
        PyBuffer_Release(&s);
        return NULL;
    }
    int32_t *dst = (int32_t *)PyBytes_AsString(out);
    Py_BEGIN_ALLOW_THREADS
    rc = tf_jpeg_sizes(fd, (const int64_t *)o.buf, (const int64_t *)s.buf, n, dst);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&o);
    PyBuffer_Release(&s);
    if (rc != 0) {
        Py_DECREF(out);
        raise_io(rc);
        return NULL;
    }
    return out;
}

const char tf_scan_checks_doc[] =
    "scan_checks(fd, offsets, sizes, max_pixels=0) -> bytes\n"
    "--\n\n"
    "One uint8 verdict per image member at offsets (sizes bytes each; int64 arrays) of the\n"
    "file open as fd: 1 its whole scan intact (check()'s verdict), 2 damaged, 0 not checked\n"
    "(not a JPEG, more than max_pixels pixels (0: no limit), or the file ends before it).\n"
    "Reads only the first two bytes of members that are no JPEG. Releases the GIL.\n"
    "Raises OSError (a read failed).";

PyObject *tf_py_scan_checks(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"fd", "offsets", "sizes", "max_pixels", NULL};
    int fd;
    PyObject *offsets, *sizes;
    long long max_pixels = 0;
    Py_buffer o, s;
    size_t n;
    int rc = 0, err = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOO|L:scan_checks", kwlist, &fd, &offsets, &sizes, &max_pixels))
        return NULL;
    if (pairs(offsets, sizes, &o, &s, &n) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (!out) {
        PyBuffer_Release(&o);
        PyBuffer_Release(&s);
        return NULL;
    }
    uint8_t *dst = (uint8_t *)PyBytes_AsString(out);
    Py_BEGIN_ALLOW_THREADS
    JpegWindow *j = tf_thread_state();
    if (!j) {
        rc = TF_SCAN_NOMEM;
    } else {
        rc = tf_scan_checks(j, fd, (const int64_t *)o.buf, (const int64_t *)s.buf, n, max_pixels, dst);
        err = errno;
        tf_scratch_trim(tf_jpeg_scratch(j));
        tf_thread_state_put(j);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&o);
    PyBuffer_Release(&s);
    if (rc != 0) {
        Py_DECREF(out);
        if (rc == TF_SCAN_NOMEM) return PyErr_NoMemory();
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return out;
}
