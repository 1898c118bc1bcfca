/* The bindings of the per-chunk calls of the CPU path (chunk.c, windows.c) in
 * turbofeed.decode._crop: argument checks, the GIL released once around a whole chunk,
 * statuses as bytes (numpy.frombuffer makes arrays of them). Limited API only (module.c).
 * The GPU path's reads are bound in module_read.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "chunk.h"
#include "module.h"
#include "module_chunk.h"
#include "windows.h"

const char tf_windows_doc[] =
    "windows(program, epoch_key, gids, heights, widths, boxes, sizes, flips) -> None\n"
    "--\n\n"
    "The crop windows of n samples (turbofeed.transforms.program): sample i (int64 id\n"
    "gids[i], an image of int32 heights[i] x widths[i]) gets boxes[i] (float64, n x 4),\n"
    "its output size sizes[i] (int64, n x 2: height, width) and flips[i] (uint8), from its\n"
    "counter-based draws under epoch_key, as Compose.window gives them to the bit.\n"
    "Raises ValueError for a malformed program or arrays of other types or lengths.";

PyObject *tf_py_windows(PyObject *self, PyObject *args) {
    PyObject *objs[7];
    unsigned long long key;
    Py_buffer v[7];
    (void)self;
    if (!PyArg_ParseTuple(args, "OKOOOOOO:windows", &objs[0], &key, &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &objs[6]))
        return NULL;
    Py_buffer first;
    if (tf_typed_buffer(objs[1], "gids", 'q', -1, &first) < 0) return NULL;
    const Py_ssize_t n = first.len / 8;
    PyBuffer_Release(&first);
    static const char *names[] = {"program", "gids", "heights", "widths", "boxes", "sizes", "flips"};
    const Py_ssize_t counts[] = {-1, n, n, n, 4 * n, 2 * n, n};
    if (tf_typed_all(objs, names, "dqiidqB", counts, 7, v) < 0) return NULL;
    if (v[4].readonly || v[5].readonly || v[6].readonly) {
        tf_release_all(v, 7);
        PyErr_SetString(PyExc_ValueError, "boxes, sizes and flips must be writable");
        return NULL;
    }
    const double *prog = v[0].buf;
    if (tf_program_check(prog, (size_t)(v[0].len / 8)) < 0) {
        tf_release_all(v, 7);
        PyErr_SetString(PyExc_ValueError, "malformed window program (turbofeed.transforms.program)");
        return NULL;
    }
    const int32_t *heights = v[2].buf, *widths = v[3].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (heights[i] < 1 || widths[i] < 1) {
            tf_release_all(v, 7);
            PyErr_Format(PyExc_ValueError, "image %zd is %d x %d: sizes must be >= 1", i, heights[i], widths[i]);
            return NULL;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    tf_windows(prog, (uint64_t)key, (size_t)n, v[1].buf, heights, widths, v[4].buf, v[5].buf, v[6].buf);
    Py_END_ALLOW_THREADS
    tf_release_all(v, 7);
    Py_RETURN_NONE;
}

const char tf_run_chunk_doc[] =
    "run_chunk(fds, offsets, sizes, stamps, gids, checks, rows, program, epoch_key, out, out_h, out_w,\n"
    "          channels_first=True, offset=None, factor=None, max_pixels=0, emulate_ns=0) -> (bytes, int)\n"
    "--\n\n"
    "The CPU path of a chunk in one call without the GIL: each sample read as read_chunk\n"
    "reads it, its window chosen as windows() chooses it (program, epoch_key, its int64 id\n"
    "gids[i], its header's size), and where that window's size is out's, decoded as\n"
    "crop_resize decodes it (its whole scan checked where checks[i]) into row rows[i] of out\n"
    "(uint8, or float32 with offset and factor); emulate_ns > 0: a wait instead of each\n"
    "decode (bench/emulated_cores.py). Returns (int32 (code, errno) pairs as\n"
    "bytes, nanoseconds spent reading): code 0 decoded, 1 for the per-sample path, 2 no\n"
    "memory, 3 the file changed, 4 the read failed (errno), 5 short read.";

PyObject *tf_py_run_chunk(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"fds", "offsets", "sizes", "stamps", "gids", "checks", "rows", "program", "epoch_key",
                             "out", "out_h", "out_w", "channels_first", "offset", "factor", "max_pixels",
                             "emulate_ns", NULL};
    PyObject *objs[8], *out_obj, *offset_obj = Py_None, *factor_obj = Py_None;
    unsigned long long key;
    Py_buffer v[8], out;
    int out_h, out_w, chw = 1;
    long long max_pixels = 0, emulate_ns = 0;
    float offset[3], factor[3];
    Target t;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOKOii|pOOLL:run_chunk", kwlist, &objs[0], &objs[1],
                                     &objs[2], &objs[3], &objs[4], &objs[5], &objs[6], &objs[7], &key, &out_obj,
                                     &out_h, &out_w, &chw, &offset_obj, &factor_obj, &max_pixels, &emulate_ns))
        return NULL;
    Py_buffer first;
    if (tf_typed_buffer(objs[0], "fds", 'i', -1, &first) < 0) return NULL;
    const Py_ssize_t n = first.len / 4;
    PyBuffer_Release(&first);
    static const char *names[] = {"fds", "offsets", "sizes", "stamps", "gids", "checks", "rows", "program"};
    const Py_ssize_t counts[] = {n, n, n, 3 * n, n, n, n, -1};
    if (tf_typed_all(objs, names, "iqqqqBqd", counts, 8, v) < 0) return NULL;
    if (tf_program_check(v[7].buf, (size_t)(v[7].len / 8)) < 0) {
        tf_release_all(v, 8);
        PyErr_SetString(PyExc_ValueError, "malformed window program (turbofeed.transforms.program)");
        return NULL;
    }
    Py_buffer probe;
    if (PyObject_GetBuffer(out_obj, &probe, PyBUF_SIMPLE) < 0) {
        tf_release_all(v, 8);
        return NULL;
    }
    const int normalise = offset_obj != Py_None || factor_obj != Py_None;
    const Py_ssize_t row_bytes = (Py_ssize_t)3 * (out_h > 0 ? out_h : 1) * (out_w > 0 ? out_w : 1) * (normalise ? 4 : 1);
    const Py_ssize_t nrows = probe.len / row_bytes;
    PyBuffer_Release(&probe);
    if (tf_get_target(out_obj, nrows, out_h, out_w, chw, offset_obj, factor_obj, offset, factor, &out, &t) < 0) {
        tf_release_all(v, 8);
        return NULL;
    }
    const int64_t *sizes = v[2].buf, *rows = v[6].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[i] < 0 || rows[i] < 0 || rows[i] >= nrows) {
            tf_release_all(v, 8);
            PyBuffer_Release(&out);
            PyErr_Format(PyExc_ValueError, "sample %zd: a negative size, or a row outside out", i);
            return NULL;
        }
    }
    PyObject *codes = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!codes) {
        tf_release_all(v, 8);
        PyBuffer_Release(&out);
        return NULL;
    }
    int32_t *status = (int32_t *)PyBytes_AsString(codes);
    long long reading = -1;
    Py_BEGIN_ALLOW_THREADS
    JpegWindow *j = tf_thread_state();
    if (j) {
        reading = tf_chunk_run(j, (size_t)n, v[0].buf, v[1].buf, sizes, v[3].buf, v[4].buf, v[5].buf, rows,
                               v[7].buf, (uint64_t)key, out.buf, (size_t)row_bytes, &t, max_pixels, emulate_ns,
                               status);
        tf_scratch_trim(tf_jpeg_scratch(j));
        tf_thread_state_put(j);
    }
    Py_END_ALLOW_THREADS
    tf_release_all(v, 8);
    PyBuffer_Release(&out);
    if (reading < 0) {
        Py_DECREF(codes);
        return PyErr_NoMemory();
    }
    return Py_BuildValue("(NL)", codes, reading);
}

const char tf_run_chunk_at_doc[] =
    "run_chunk_at(order, first, step, n, row0, table, program, epoch_key, out, out_h, out_w, labels_out,\n"
    "             ids_out, channels_first=True, offset=None, factor=None, max_pixels=0, emulate_ns=0)\n"
    "    -> (bytes, int, int)\n"
    "--\n\n"
    "run_chunk with the chunk's bookkeeping done natively too: row i is sample\n"
    "order[first + i * step] (int64), decoded into row row0 + i of out. table holds the\n"
    "dataset's arrays by sample id and by source: (readable uint8, source int32, fds int32\n"
    "by source, offsets int64, sizes int64, stamps int64 3 by source, checked uint8, labels\n"
    "int64). A decoded row's label and id go to labels_out[row0 + i] and ids_out[row0 + i]\n"
    "and its checked flag is set. Returns (int32 (code, errno) pairs as bytes, or None where\n"
    "every row was decoded; nanoseconds reading; bytes read): the codes of run_chunk, and 6\n"
    "where the sample's shard is not open (fds -1): untouched, for the caller to open and\n"
    "run again.";

PyObject *tf_py_run_chunk_at(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"order", "first", "step", "n", "row0", "table", "program", "epoch_key", "out", "out_h",
                             "out_w", "labels_out", "ids_out", "channels_first", "offset", "factor", "max_pixels",
                             "emulate_ns", NULL};
    enum { ORDER, READABLE, SOURCE, FDS, OFFSETS, SIZES, STAMPS, CHECKED, LABELS, PROGRAM, LABELS_OUT, IDS_OUT, K };
    PyObject *objs[K], *table, *out_obj, *offset_obj = Py_None, *factor_obj = Py_None;
    long long first, step, count, row0, max_pixels = 0, emulate_ns = 0;
    unsigned long long key;
    int out_h, out_w, chw = 1;
    float offset[3], factor[3];
    Py_buffer v[K], out;
    Target t;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLLLLOOKOiiOO|pOOLL:run_chunk_at", kwlist, &objs[ORDER], &first,
                                     &step, &count, &row0, &table, &objs[PROGRAM], &key, &out_obj, &out_h, &out_w,
                                     &objs[LABELS_OUT], &objs[IDS_OUT], &chw, &offset_obj, &factor_obj, &max_pixels,
                                     &emulate_ns))
        return NULL;
    if (tf_table_items(table, objs + READABLE) < 0) return NULL;
    static const char *names[] = {"order", "readable", "source", "fds", "offsets", "sizes", "stamps", "checked",
                                  "labels", "program", "labels_out", "ids_out"};
    const Py_ssize_t any[K] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    if (tf_typed_all(objs, names, "qBiiqqqBqdqq", any, K, v) < 0) return NULL;
    const Py_ssize_t num_ids = v[READABLE].len, num_sources = v[FDS].len / 4, nrows = v[LABELS_OUT].len / 8;
    const char *wrong = tf_plan_wrong(v, first, step, count, NULL);
    if (!wrong && (v[LABELS_OUT].readonly || v[IDS_OUT].readonly))
        wrong = "labels_out and ids_out must be writable";
    else if (!wrong && (row0 < 0 || row0 + count > nrows || row0 + count > v[IDS_OUT].len / 8))
        wrong = "the chunk's rows are outside labels_out or ids_out";
    else if (!wrong && tf_program_check(v[PROGRAM].buf, (size_t)(v[PROGRAM].len / 8)) < 0)
        wrong = "malformed window program (turbofeed.transforms.program)";
    const int64_t *order = v[ORDER].buf, *sizes = v[SIZES].buf;
    const int32_t *source = v[SOURCE].buf;
    if (wrong) {
        tf_release_all(v, K);
        PyErr_SetString(PyExc_ValueError, wrong);
        return NULL;
    }
    if (tf_get_target(out_obj, nrows, out_h, out_w, chw, offset_obj, factor_obj, offset, factor, &out, &t) < 0) {
        tf_release_all(v, K);
        return NULL;
    }
    const int normalise = offset_obj != Py_None || factor_obj != Py_None;
    const size_t row_bytes = (size_t)3 * out_h * out_w * (normalise ? 4 : 1);
    PyObject *codes = PyBytes_FromStringAndSize(NULL, count * 8);
    if (!codes) {
        tf_release_all(v, K);
        PyBuffer_Release(&out);
        return NULL;
    }
    ChunkPlan p = {order, first, step, row0, num_ids, num_sources, v[READABLE].buf, source, v[FDS].buf,
                   v[OFFSETS].buf, sizes, v[STAMPS].buf, v[CHECKED].buf, v[LABELS].buf, v[LABELS_OUT].buf,
                   v[IDS_OUT].buf};
    int32_t *status = (int32_t *)PyBytes_AsString(codes);
    long long reading = -1;
    int64_t nbytes = 0;
    Py_BEGIN_ALLOW_THREADS
    JpegWindow *j = tf_thread_state();
    if (j) {
        reading = tf_chunk_run_at(j, (size_t)count, &p, v[PROGRAM].buf, (uint64_t)key, out.buf, row_bytes, &t,
                                  max_pixels, emulate_ns, status, &nbytes);
        tf_scratch_trim(tf_jpeg_scratch(j));
        tf_thread_state_put(j);
    }
    Py_END_ALLOW_THREADS
    tf_release_all(v, K);
    PyBuffer_Release(&out);
    if (reading < 0) {
        Py_DECREF(codes);
        return PyErr_NoMemory();
    }
    long long failed = 0;
    for (long long i = 0; i < count; i++) failed += status[2 * i] != TF_RUN_OK;
    if (!failed) { /* the usual chunk: nothing for the caller to look at (and no array to make) */
        Py_DECREF(codes);
        Py_INCREF(Py_None);
        codes = Py_None;
    }
    return Py_BuildValue("(NLL)", codes, reading, (long long)nbytes);
}
