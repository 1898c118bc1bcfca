/* The dataset index's native reads, bound in module_index.c, listed in module.c. */
#ifndef TF_MODULE_INDEX_H
#define TF_MODULE_INDEX_H

#include <Python.h>

extern const char tf_tar_walk_doc[], tf_gather_doc[], tf_jpeg_sizes_doc[], tf_scan_checks_doc[];
PyObject *tf_py_tar_walk(PyObject *self, PyObject *args);
PyObject *tf_py_gather(PyObject *self, PyObject *args);
PyObject *tf_py_jpeg_sizes(PyObject *self, PyObject *args);
PyObject *tf_py_scan_checks(PyObject *self, PyObject *args, PyObject *kwargs);

#endif
