/* The per-chunk calls (chunk.c, windows.c), bound in module_chunk.c (the CPU path's) and
 * module_read.c (the GPU path's reads), listed in module.c. */
#ifndef TF_MODULE_CHUNK_H
#define TF_MODULE_CHUNK_H

#include <Python.h>

#include <stdint.h>

extern const char tf_read_chunk_doc[], tf_windows_doc[], tf_run_chunk_doc[], tf_run_chunk_at_doc[],
    tf_read_chunk_at_doc[];
PyObject *tf_py_read_chunk(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *tf_py_read_chunk_at(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *tf_py_windows(PyObject *self, PyObject *args);
PyObject *tf_py_run_chunk(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *tf_py_run_chunk_at(PyObject *self, PyObject *args, PyObject *kwargs);

/* What is wrong with a chunk's plan and table (NULL: nothing), checked holding the GIL
 * before the GIL-free work: v holds (order, readable, source, fds, offsets, sizes,
 * stamps, checked, labels) as typed buffers (int64, uint8, int32, int32, int64 ...); the
 * table's lengths agree, checked is writable, and every row's position lies inside the
 * order, its sample id, source and size in range. *total (if not NULL): the sizes of the
 * rows readable by range, summed. */
const char *tf_plan_wrong(const Py_buffer *v, long long first, long long step, long long count, int64_t *total);

#endif
