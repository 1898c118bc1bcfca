/* Argument checks shared by the binding files (module.c, module_index.c,
 * module_chunk.c, module_read.c): buffer formats, output targets, typed arrays. Limited
 * API only. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "module.h"

const char *tf_skip_order(const char *fmt) {
    if (fmt == NULL) return "B";
    while (*fmt == '@' || *fmt == '=' || *fmt == '<' || *fmt == '>' || *fmt == '!') fmt++;
    return fmt;
}

static int read_triple(PyObject *obj, const char *name, float out[3]) {
    /* PySequence_Size/GetItem, not the PySequence_Fast macros: those are outside the
     * stable ABI (the extension is built with Py_LIMITED_API, one wheel for every Python). */
    Py_ssize_t n = PySequence_Check(obj) ? PySequence_Size(obj) : -1;
    if (n != 3) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be 3 numbers", name);
        return -1;
    }
    for (Py_ssize_t i = 0; i < 3; i++) {
        PyObject *item = PySequence_GetItem(obj, i);
        if (!item) return -1;
        double v = PyFloat_AsDouble(item);
        Py_DECREF(item);
        if (v == -1.0 && PyErr_Occurred()) return -1;
        out[i] = (float)v;
    }
    return 0;
}

/* Check out (rows times 3*out_h*out_w items; and offset/factor) and fill the target
 * (not mirrored); on failure an exception is set and nothing is held. On success the
 * caller releases out. */
int tf_get_target(PyObject *out_obj, Py_ssize_t rows, int out_h, int out_w, int chw, PyObject *offset_obj,
                  PyObject *factor_obj, float offset[3], float factor[3], Py_buffer *out, Target *t) {
    const int normalise = offset_obj != Py_None || factor_obj != Py_None;
    if (normalise && (read_triple(offset_obj, "offset", offset) < 0 || read_triple(factor_obj, "factor", factor) < 0))
        return -1;
    if (out_h <= 0 || out_w <= 0 || out_h > (1 << 15) || out_w > (1 << 15)) {
        PyErr_Format(PyExc_ValueError, "output size %dx%d out of range", out_h, out_w);
        return -1;
    }
    if (PyObject_GetBuffer(out_obj, out, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    const char *fmt = tf_skip_order(out->format);
    const Py_ssize_t itemsize = normalise ? 4 : 1;
    if (strcmp(fmt, normalise ? "f" : "B") != 0 || out->itemsize != itemsize ||
        out->len != rows * 3 * out_h * out_w * itemsize) {
        PyErr_Format(PyExc_ValueError,
                     "out must be a C-contiguous %s buffer of %zd*3*%d*%d items (got format '%s', %zd bytes)",
                     normalise ? "float32" : "uint8", rows, out_h, out_w, fmt, out->len);
        PyBuffer_Release(out);
        return -1;
    }
    Target target = {out->buf, out_h, out_w, 0, chw, normalise ? offset : NULL, normalise ? factor : NULL};
    *t = target;
    return 0;
}

static int format_is(const Py_buffer *view, char code) {
    const char *f = view->format ? view->format : "B";
    while (*f == '@' || *f == '=' || *f == '<') f++;
    if (code == 'q') return view->itemsize == 8 && (strcmp(f, "q") == 0 || strcmp(f, "l") == 0);
    if (code == 'i') return view->itemsize == 4 && (strcmp(f, "i") == 0 || (strcmp(f, "l") == 0 && sizeof(long) == 4));
    if (code == 'd') return view->itemsize == 8 && strcmp(f, "d") == 0;
    return view->itemsize == 1 && (strcmp(f, "B") == 0 || strcmp(f, "?") == 0 || strcmp(f, "b") == 0);
}

int tf_typed_buffer(PyObject *obj, const char *name, char code, Py_ssize_t count, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (!format_is(view, code) || (count >= 0 && view->len != count * view->itemsize)) {
        static const char *what[] = {"int64", "int32", "float64", "uint8"};
        const char *type = what[code == 'q' ? 0 : code == 'i' ? 1 : code == 'd' ? 2 : 3];
        if (count >= 0) {
            PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous %s array of %zd items", name, type, count);
        } else {
            PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous %s array", name, type);
        }
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}


void tf_release_all(Py_buffer *views, int k) {
    for (int i = 0; i < k; i++) PyBuffer_Release(&views[i]);
}

int tf_typed_all(PyObject **objs, const char **names, const char *codes, const Py_ssize_t *counts, int k,
                 Py_buffer *views) {
    for (int i = 0; i < k; i++) {
        if (tf_typed_buffer(objs[i], names[i], codes[i], counts[i], &views[i]) < 0) {
            tf_release_all(views, i);
            return -1;
        }
    }
    return 0;
}

int tf_table_items(PyObject *table, PyObject **items) {
    if (!PyTuple_Check(table) || PyTuple_Size(table) != TF_TABLE_ARRAYS) {
        PyErr_SetString(PyExc_ValueError, "table must be a tuple of 8 arrays");
        return -1;
    }
    for (Py_ssize_t i = 0; i < TF_TABLE_ARRAYS; i++) items[i] = PyTuple_GetItem(table, i);
    return 0;
}
