/* The bindings of the GPU path's per-chunk reads (chunk.c) in turbofeed.decode._crop:
 * read_chunk (the reads given one by one) and read_chunk_at (the reads gathered from the
 * pass's plan and the dataset's table, as run_chunk_at gathers them), and the checks of
 * such a plan and table both *_at calls share. Every index is checked holding the GIL;
 * the GIL is released once around a whole chunk. Limited API only (module.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "chunk.h"
#include "module.h"
#include "module_chunk.h"

const char tf_read_chunk_doc[] =
    "read_chunk(fds, offsets, sizes, stamps, buffer, starts, checks=None, max_pixels=0) -> bytes\n"
    "--\n\n"
    "For each sample i: pread sizes[i] bytes at offsets[i] of descriptor fds[i] (int32)\n"
    "into buffer[starts[i]:], fstat it and compare (size,\n"
    "mtime_ns, ctime_ns) with stamps[i] (int64, n x 3), then read the JPEG header, refuse\n"
    "more than max_pixels pixels (0: no limit) and, where checks[i] (uint8), check the whole\n"
    "scan. Returns int32 (status, height, width) triples as bytes: status 0 ok, 1 for the\n"
    "general decoder, 2 bad data, 3 the file changed, 4 the read failed (the errno in place\n"
    "of the height), 5 short read. Releases the GIL for the whole chunk.";

PyObject *tf_py_read_chunk(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"fds", "offsets", "sizes", "stamps", "buffer", "starts", "checks", "max_pixels", NULL};
    PyObject *objs[7];
    Py_buffer v[7];
    long long max_pixels = 0;
    objs[6] = Py_None;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|OL:read_chunk", kwlist, &objs[0], &objs[1], &objs[2],
                                     &objs[3], &objs[4], &objs[5], &objs[6], &max_pixels))
        return NULL;
    Py_buffer first;
    if (tf_typed_buffer(objs[0], "fds", 'i', -1, &first) < 0) return NULL;
    const Py_ssize_t n = first.len / 4;
    PyBuffer_Release(&first);
    static const char *names[] = {"fds", "offsets", "sizes", "stamps", "buffer", "starts", "checks"};
    const Py_ssize_t counts[] = {n, n, n, 3 * n, -1, n, n};
    const int k = objs[6] == Py_None ? 6 : 7;
    if (tf_typed_all(objs, names, "iqqqBqB", counts, k, v) < 0) return NULL;
    const int64_t *sizes = v[2].buf, *starts = v[5].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[i] < 0 || starts[i] < 0 || starts[i] + sizes[i] > v[4].len) {
            tf_release_all(v, k);
            PyErr_Format(PyExc_ValueError, "sample %zd does not fit in the buffer", i);
            return NULL;
        }
    }
    PyObject *head = PyBytes_FromStringAndSize(NULL, n * 3 * 4);
    if (!head) {
        tf_release_all(v, k);
        return NULL;
    }
    int32_t *h = (int32_t *)PyBytes_AsString(head);
    int nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    JpegWindow *j = tf_thread_state();
    if (!j) {
        nomem = 1;
    } else {
        tf_chunk_read(j, (size_t)n, v[0].buf, v[1].buf, sizes, v[3].buf, v[4].buf, starts,
                      k == 7 ? (const uint8_t *)v[6].buf : NULL, max_pixels, h);
        tf_scratch_trim(tf_jpeg_scratch(j));
        tf_thread_state_put(j);
    }
    Py_END_ALLOW_THREADS
    tf_release_all(v, k);
    if (nomem) {
        Py_DECREF(head);
        return PyErr_NoMemory();
    }
    return head;
}

const char *tf_plan_wrong(const Py_buffer *v, long long first, long long step, long long count, int64_t *total) {
    enum { ORDER, READABLE, SOURCE, FDS, OFFSETS, SIZES, STAMPS, CHECKED, LABELS };
    const Py_ssize_t num_ids = v[READABLE].len, num_sources = v[FDS].len / 4, positions = v[ORDER].len / 8;
    if (v[SOURCE].len / 4 != num_ids || v[OFFSETS].len / 8 != num_ids || v[SIZES].len / 8 != num_ids ||
        v[CHECKED].len != num_ids || v[LABELS].len / 8 != num_ids || v[STAMPS].len / 8 != 3 * num_sources)
        return "the table's arrays disagree in length";
    if (v[CHECKED].readonly) return "checked must be writable";
    if (count < 0) return "a chunk of a negative count";
    if (count > 0 && (first < 0 || first >= positions || first + (count - 1) * step < 0 ||
                      first + (count - 1) * step >= positions))
        return "the chunk's positions are outside the order";
    const int64_t *order = v[ORDER].buf, *sizes = v[SIZES].buf;
    const int32_t *source = v[SOURCE].buf;
    const uint8_t *readable = v[READABLE].buf;
    int64_t sum = 0;
    for (long long i = 0; i < count; i++) {
        const int64_t gid = order[first + i * step];
        if (gid < 0 || gid >= num_ids || source[gid] < 0 || source[gid] >= num_sources || sizes[gid] < 0 ||
            sizes[gid] > INT64_MAX - sum)
            return "a sample id of the order, or its source or size, is out of range";
        if (readable[gid]) sum += sizes[gid];
    }
    if (total) *total = sum;
    return NULL;
}

const char tf_read_chunk_at_doc[] =
    "read_chunk_at(order, first, step, n, table, buffer, max_pixels=0) -> (bytes | None, bytes, int)\n"
    "--\n\n"
    "read_chunk with the chunk's bookkeeping done natively, as run_chunk_at does it: row i\n"
    "is sample order[first + i * step] (int64), its read gathered from table (that of\n"
    "run_chunk_at). The rows readable by range go one after another into buffer (uint8,\n"
    "writable), whose shard is open or not. Returns (head, place, total): place, int64\n"
    "(sample id, start, size) triples as bytes (size 0 for a row not readable), and total,\n"
    "the bytes they take; head None where buffer is shorter than total (nothing read: call\n"
    "again with a buffer of total bytes), else int32 (status, height, width) triples as\n"
    "bytes: the statuses of read_chunk (a row not readable 1), and 6 where the sample's\n"
    "shard is not open (fds -1: nothing read there, for the caller to open and read). A\n"
    "row's whole scan is checked where its checked flag is 0, and the flag set where its\n"
    "status is 0. Releases the GIL for the reads.";

PyObject *tf_py_read_chunk_at(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"order", "first", "step", "n", "table", "buffer", "max_pixels", NULL};
    enum { ORDER, READABLE, SOURCE, FDS, OFFSETS, SIZES, STAMPS, CHECKED, LABELS, BUFFER, K };
    PyObject *objs[K], *table;
    long long first, step, count, max_pixels = 0;
    Py_buffer v[K];
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLLLOO|L:read_chunk_at", kwlist, &objs[ORDER], &first, &step,
                                     &count, &table, &objs[BUFFER], &max_pixels))
        return NULL;
    if (tf_table_items(table, objs + READABLE) < 0) return NULL;
    static const char *names[] = {"order", "readable", "source", "fds", "offsets", "sizes", "stamps", "checked",
                                  "labels", "buffer"};
    const Py_ssize_t any[K] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    if (tf_typed_all(objs, names, "qBiiqqqBqB", any, K, v) < 0) return NULL;
    int64_t total = 0;
    const char *wrong = tf_plan_wrong(v, first, step, count, &total);
    if (!wrong && v[BUFFER].readonly) wrong = "buffer must be writable";
    if (wrong) {
        tf_release_all(v, K);
        PyErr_SetString(PyExc_ValueError, wrong);
        return NULL;
    }
    ChunkPlan p = {v[ORDER].buf, first, step, 0, v[READABLE].len, v[FDS].len / 4, v[READABLE].buf, v[SOURCE].buf,
                   v[FDS].buf, v[OFFSETS].buf, v[SIZES].buf, v[STAMPS].buf, v[CHECKED].buf, v[LABELS].buf,
                   NULL, NULL};
    PyObject *place = PyBytes_FromStringAndSize(NULL, count * 3 * 8);
    PyObject *head = place ? PyBytes_FromStringAndSize(NULL, count * 3 * 4) : NULL;
    if (!head) {
        Py_XDECREF(place);
        tf_release_all(v, K);
        return NULL;
    }
    int64_t *at = (int64_t *)PyBytes_AsString(place);
    tf_chunk_layout((size_t)count, &p, at); /* the same total as tf_plan_wrong's */
    if (total > (int64_t)v[BUFFER].len) { /* nothing read: the caller takes a buffer of total bytes */
        tf_release_all(v, K);
        Py_DECREF(head);
        return Py_BuildValue("(ONL)", Py_None, place, (long long)total);
    }
    int32_t *h = (int32_t *)PyBytes_AsString(head);
    int nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    JpegWindow *j = tf_thread_state();
    if (!j) {
        nomem = 1;
    } else {
        tf_chunk_read_at(j, (size_t)count, &p, at, v[BUFFER].buf, max_pixels, h);
        tf_scratch_trim(tf_jpeg_scratch(j));
        tf_thread_state_put(j);
    }
    Py_END_ALLOW_THREADS
    tf_release_all(v, K);
    if (nomem) {
        Py_DECREF(head);
        Py_DECREF(place);
        return PyErr_NoMemory();
    }
    return Py_BuildValue("(NNL)", head, place, (long long)total);
}
