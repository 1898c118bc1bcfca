/* What the binding files share: the thread's decoder state (module.c) and the argument
 * checks (module_args.c). */
#ifndef TF_MODULE_H
#define TF_MODULE_H

#include <Python.h>

#include "jpeg_window.h"
#include "resample.h"

/* This thread's decoder and buffers (callable without the GIL); NULL without memory.
 * Give it back with tf_thread_state_put. */
JpegWindow *tf_thread_state(void);
void tf_thread_state_put(JpegWindow *j);

/* Check out: C-contiguous, rows * 3 * out_h * out_w items of uint8, or of float32 when
 * offset and factor are not None (3 numbers each, read into offset and factor). Fills t
 * (not mirrored) and holds out; -1 with an exception set and nothing held. */
int tf_get_target(PyObject *out_obj, Py_ssize_t rows, int out_h, int out_w, int chw, PyObject *offset_obj,
                  PyObject *factor_obj, float offset[3], float factor[3], Py_buffer *out, Target *t);

/* A buffer format without its byte-order prefix ("B" for none). */
const char *tf_skip_order(const char *fmt);

/* A C-contiguous buffer of count items of format code ("q": int64, "i": int32, "d":
 * float64, "B": uint8; count < 0: any count); -1 with a ValueError naming it, nothing held. */
int tf_typed_buffer(PyObject *obj, const char *name, char code, Py_ssize_t count, Py_buffer *view);

/* tf_typed_buffer for each of k objects (names[i], codes[i], counts[i]) into views; -1
 * with everything released. tf_release_all releases the first k views. */
int tf_typed_all(PyObject **objs, const char **names, const char *codes, const Py_ssize_t *counts, int k,
                 Py_buffer *views);
void tf_release_all(Py_buffer *views, int k);

/* The 8 arrays of a chunk call's table (turbofeed/decode/chunk_calls.py: readable, source,
 * fds, offsets, sizes, stamps, checked, labels) into items, borrowed; -1 with a
 * ValueError when table is not a tuple of 8. */
#define TF_TABLE_ARRAYS 8
int tf_table_items(PyObject *table, PyObject **items);

#endif
