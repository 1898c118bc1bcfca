/* The per-chunk calls (chunk.c, windows.c), bound in module_chunk.c, listed in module.c. */
#ifndef TF_MODULE_CHUNK_H
#define TF_MODULE_CHUNK_H

#include <Python.h>

extern const char tf_read_chunk_doc[], tf_windows_doc[], tf_run_chunk_doc[], tf_run_chunk_at_doc[];
PyObject *tf_py_read_chunk(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *tf_py_windows(PyObject *self, PyObject *args);
PyObject *tf_py_run_chunk(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *tf_py_run_chunk_at(PyObject *self, PyObject *args, PyObject *kwargs);

#endif
