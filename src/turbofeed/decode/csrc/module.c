/* turbofeed.decode._crop, the CPython bindings: JPEG bytes -> only the crop window
 * decoded (jpeg_window.c) -> antialiased bilinear resize exactly like Pillow's
 * (resample.c, kernels.c) -> written straight into a caller's buffer, in one call
 * without the GIL. Pixels already decoded (uint8 arrays of 1, 3 or 4 channels) go
 * through the same resampler (resize()).
 *
 * This file only parses arguments, checks buffers, releases the GIL and turns return
 * codes into exceptions: RC_JPEG and RC_VALUE raise ValueError, RC_FALLBACK
 * NotImplementedError (the caller uses its general decoder), RC_TOO_LARGE
 * turbofeed.errors.ImageTooLarge (a ValueError), RC_NOMEM MemoryError.
 *
 * Scratch memory (the libjpeg object and the buffers) is kept per thread and freed
 * when the thread exits.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#ifndef _WIN32
#include <pthread.h>
#endif

#include "jpeg_window.h"
#include "kernels.h"
#include "module.h"
#include "module_chunk.h"
#include "module_index.h"
#include "resample.h"

static PyObject *image_too_large; /* turbofeed.errors.ImageTooLarge, imported at init */

/* ---------------------------------------------------------------- per-thread state */

#ifndef _WIN32
static pthread_key_t state_key;
static int state_key_ok = 0;

static void state_free(void *arg) { tf_jpeg_free((JpegWindow *)arg); }

static JpegWindow *state_get(void) {
    JpegWindow *j = (JpegWindow *)pthread_getspecific(state_key);
    if (!j) {
        j = tf_jpeg_new();
        if (j && pthread_setspecific(state_key, j) != 0) {
            tf_jpeg_free(j);
            j = NULL;
        }
    }
    return j;
}
static void state_put(JpegWindow *j) { (void)j; }
#else
static JpegWindow *state_get(void) { return tf_jpeg_new(); }
static void state_put(JpegWindow *j) { tf_jpeg_free(j); }
#endif

JpegWindow *tf_thread_state(void) { return state_get(); }
void tf_thread_state_put(JpegWindow *j) { state_put(j); }

/* ---------------------------------------------------------------- arguments */

static int raise_for(int rc, const char *msg) {
    switch (rc) {
        case RC_OK: return 0;
        case RC_NOMEM: PyErr_NoMemory(); return -1;
        case RC_FALLBACK: PyErr_SetString(PyExc_NotImplementedError, msg); return -1;
        case RC_JPEG: PyErr_Format(PyExc_ValueError, "bad JPEG: %s", msg); return -1;
        default: PyErr_SetString(PyExc_ValueError, msg); return -1;
    }
}

static int get_target(PyObject *out_obj, int out_h, int out_w, int flip, int chw, PyObject *offset_obj,
                      PyObject *factor_obj, float offset[3], float factor[3], Py_buffer *out, Target *t) {
    if (tf_get_target(out_obj, 1, out_h, out_w, chw, offset_obj, factor_obj, offset, factor, out, t) < 0) return -1;
    t->flip = flip;
    return 0;
}

/* ---------------------------------------------------------------- calls without the GIL */

/* One call's arguments, for call_released. */
typedef struct {
    const unsigned char *data;
    size_t len;
    const double *box;
    const Target *t;
    int dct, check;
    long long max_pixels;
} JpegJob;

typedef struct {
    const uint8_t *pixels;
    int H, W, channels;
    const double *box;
    const Target *t;
    long long max_pixels;
} ArrayJob;

typedef struct {
    const unsigned char *data;
    size_t len;
    long long max_pixels;
} CheckJob;

static int run_check_job(JpegWindow *j, const void *arg) {
    const CheckJob *job = arg;
    return tf_jpeg_check(j, job->data, job->len, job->max_pixels);
}

static int run_jpeg_job(JpegWindow *j, const void *arg) {
    const JpegJob *job = arg;
    return tf_jpeg_crop_resize(j, job->data, job->len, job->box, job->t, job->dct, job->check, job->max_pixels);
}

static int run_array_job(JpegWindow *j, const void *arg) {
    const ArrayJob *job = arg;
    return tf_resize_array(tf_jpeg_scratch(j), job->pixels, job->H, job->W, job->channels, job->box, job->t,
                           job->max_pixels);
}

/* fn(state, job) on this thread's state with the GIL released, then both buffers
 * released; None, or the exception rc stands for (the message, or the size of an image
 * over max_pixels, copied out of the state first). */
static PyObject *call_released(int (*fn)(JpegWindow *, const void *), const void *job, long long max_pixels,
                               Py_buffer *out, Py_buffer *src) {
    char msg[TF_MSG_LEN];
    unsigned long long size[2] = {0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    JpegWindow *j = state_get();
    if (!j) {
        rc = RC_NOMEM;
    } else {
        Scratch *s = tf_jpeg_scratch(j);
        rc = fn(j, job);
        memcpy(msg, s->msg, sizeof msg);
        memcpy(size, s->size, sizeof size);
        tf_scratch_trim(s);
        state_put(j);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(out);
    PyBuffer_Release(src);
    if (rc == RC_TOO_LARGE) { /* ImageTooLarge(height, width, limit) words the message */
        PyObject *exc = PyObject_CallFunction(image_too_large, "KKL", size[0], size[1], max_pixels);
        if (exc) {
            PyErr_SetObject(image_too_large, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    if (raise_for(rc, msg) < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- functions */

PyDoc_STRVAR(crop_resize_doc,
"crop_resize(data, x0, y0, x1, y1, out, out_h, out_w, flip=False, channels_first=True,\n"
"            dct_scale=False, offset=None, factor=None, max_pixels=0, check_scan=True)\n"
"--\n\n"
"Decode the part of a JPEG that box (x0, y0, x1, y1) needs (source pixel coordinates,\n"
"clamped to the image), resize it to out_h x out_w exactly like Pillow's BILINEAR resize\n"
"with a box, and write it into out (C-contiguous, 3*out_h*out_w items; CHW or HWC,\n"
"mirrored left-right when flip). out is uint8, or float32 when offset and factor (3\n"
"numbers each) are given: out = (pixel - offset) * factor. dct_scale decodes at half\n"
"size when the box is at least twice the output in both axes. check_scan: check the\n"
"whole scan for damage (check()), else only the rows up to the box's last. Releases the GIL.\n\n"
"Raises turbofeed.errors.ImageTooLarge (a ValueError) when the header declares more than\n"
"max_pixels pixels (0: no limit), before decoding; ValueError (corrupt or not a JPEG, bad\n"
"arguments) or NotImplementedError (CMYK/YCCK, or no EOI marker at the end: use a\n"
"general decoder).");

static PyObject *py_crop_resize(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"data", "x0", "y0", "x1", "y1", "out", "out_h", "out_w", "flip",
                             "channels_first", "dct_scale", "offset", "factor", "max_pixels", "check_scan", NULL};
    Py_buffer data, out;
    double box[4];
    PyObject *out_obj, *offset_obj = Py_None, *factor_obj = Py_None;
    int out_h, out_w, flip = 0, chw = 1, dct = 0, check = 1;
    long long max_pixels = 0;
    float offset[3], factor[3];
    Target t;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*ddddOii|pppOOLp:crop_resize", kwlist, &data,
                                     &box[0], &box[1], &box[2], &box[3], &out_obj, &out_h, &out_w,
                                     &flip, &chw, &dct, &offset_obj, &factor_obj, &max_pixels, &check))
        return NULL;
    if (get_target(out_obj, out_h, out_w, flip, chw, offset_obj, factor_obj, offset, factor, &out, &t) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    const JpegJob job = {(const unsigned char *)data.buf, (size_t)data.len, box, &t, dct, check, max_pixels};
    return call_released(run_jpeg_job, &job, max_pixels, &out, &data);
}

PyDoc_STRVAR(check_doc,
"check(data, max_pixels=0)\n"
"--\n\n"
"Check a JPEG's entropy-coded data without decoding its pixels (every bit of the scan is\n"
"Huffman-decoded, nothing is resized). Returns None when intact. Raises ValueError for\n"
"damaged data (libjpeg's corrupt-data warnings in the scan; not header warnings such as\n"
"junk before a marker) or bytes that are not a JPEG, turbofeed.errors.ImageTooLarge over\n"
"max_pixels (0: no limit), from the header. Releases the GIL.");

static PyObject *py_check(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"data", "max_pixels", NULL};
    Py_buffer data, none;
    long long max_pixels = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|L:check", kwlist, &data, &max_pixels)) return NULL;
    memset(&none, 0, sizeof none); /* no output buffer: releasing it does nothing */
    const CheckJob job = {(const unsigned char *)data.buf, (size_t)data.len, max_pixels};
    return call_released(run_check_job, &job, max_pixels, &none, &data);
}

PyDoc_STRVAR(resize_doc,
"resize(pixels, x0, y0, x1, y1, out, out_h, out_w, flip=False, channels_first=True,\n"
"       offset=None, factor=None, max_pixels=0)\n"
"--\n\n"
"crop_resize for pixels already decoded: a C-contiguous uint8 array (H, W), (H, W, 1),\n"
"(H, W, 3) or (H, W, 4) (gray repeated to RGB, alpha dropped). Same resize, output and\n"
"arguments; reads only the rows and columns the filter needs. Releases the GIL.\n\n"
"Raises ValueError for another dtype, shape or layout, or bad arguments, and\n"
"turbofeed.errors.ImageTooLarge for more than max_pixels pixels (0: no limit).");

static PyObject *py_resize(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"pixels", "x0", "y0", "x1", "y1", "out", "out_h", "out_w", "flip",
                             "channels_first", "offset", "factor", "max_pixels", NULL};
    Py_buffer pixels, out;
    double box[4];
    PyObject *pixels_obj, *out_obj, *offset_obj = Py_None, *factor_obj = Py_None;
    int out_h, out_w, flip = 0, chw = 1;
    long long max_pixels = 0;
    float offset[3], factor[3];
    Target t;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OddddOii|ppOOL:resize", kwlist, &pixels_obj, &box[0],
                                     &box[1], &box[2], &box[3], &out_obj, &out_h, &out_w, &flip, &chw,
                                     &offset_obj, &factor_obj, &max_pixels))
        return NULL;
    if (PyObject_GetBuffer(pixels_obj, &pixels, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    const int channels = pixels.ndim == 2 ? 1 : pixels.ndim == 3 ? (int)pixels.shape[2] : 0;
    if (strcmp(tf_skip_order(pixels.format), "B") != 0 || pixels.itemsize != 1 ||
        !(channels == 1 || channels == 3 || channels == 4) || pixels.shape[0] < 1 || pixels.shape[1] < 1 ||
        pixels.shape[0] > INT32_MAX / 8 || pixels.shape[1] > INT32_MAX / 8) {
        PyErr_Format(PyExc_ValueError, "pixels must be uint8 (H, W[, 1|3|4]), got format '%s' with %d dimensions",
                     tf_skip_order(pixels.format), pixels.ndim);
        PyBuffer_Release(&pixels);
        return NULL;
    }
    if (get_target(out_obj, out_h, out_w, flip, chw, offset_obj, factor_obj, offset, factor, &out, &t) < 0) {
        PyBuffer_Release(&pixels);
        return NULL;
    }
    const ArrayJob job = {(const uint8_t *)pixels.buf, (int)pixels.shape[0], (int)pixels.shape[1], channels, box, &t,
                          max_pixels};
    return call_released(run_array_job, &job, max_pixels, &out, &pixels);
}

PyDoc_STRVAR(header_doc,
"header(data) -> (height, width, colorspace)\n"
"--\n\n"
"Size and colour space ('gray', 'rgb', 'ycbcr', 'cmyk', 'ycck', 'unknown') from the\n"
"JPEG header. Raises ValueError for bytes that are not a readable JPEG header.");

static PyObject *py_header(PyObject *self, PyObject *arg) {
    Py_buffer data;
    int h = 0, w = 0, rc;
    const char *cs = "unknown";
    char msg[TF_MSG_LEN];
    (void)self;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    JpegWindow *j = state_get(); /* a few microseconds: not worth releasing the GIL */
    if (!j) {
        rc = RC_NOMEM;
    } else {
        rc = tf_jpeg_header(j, (const unsigned char *)data.buf, (size_t)data.len, &h, &w, &cs);
        memcpy(msg, tf_jpeg_scratch(j)->msg, sizeof msg);
        state_put(j);
    }
    PyBuffer_Release(&data);
    if (raise_for(rc, msg) < 0) return NULL;
    return Py_BuildValue("iis", h, w, cs);
}

PyDoc_STRVAR(simd_doc,
"_simd(level=None) -> str\n"
"--\n\n"
"The resampling kernels in use ('avx2', 'sse2' or 'none'); with level ('best', 'avx2',\n"
"'sse2', 'none'), switch first (for tests and benchmarks; not thread-safe). All give\n"
"the same bytes. Raises ValueError for a level this build or CPU lacks.");

static PyObject *py_simd(PyObject *self, PyObject *args) {
    const char *level = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "|z:_simd", &level)) return NULL;
    if (level != NULL && tf_simd_select(level) < 0) {
        PyErr_Format(PyExc_ValueError, "SIMD level %s is not available here", level);
        return NULL;
    }
    return PyUnicode_FromString(tf_simd_level());
}

static PyMethodDef methods[] = {
    {"_simd", py_simd, METH_VARARGS, simd_doc},
    {"check", (PyCFunction)(void (*)(void))py_check, METH_VARARGS | METH_KEYWORDS, check_doc},
    {"crop_resize", (PyCFunction)(void (*)(void))py_crop_resize, METH_VARARGS | METH_KEYWORDS,
     crop_resize_doc},
    {"gather", tf_py_gather, METH_VARARGS, tf_gather_doc},
    {"header", py_header, METH_O, header_doc},
    {"jpeg_sizes", tf_py_jpeg_sizes, METH_VARARGS, tf_jpeg_sizes_doc},
    {"read_chunk", (PyCFunction)(void (*)(void))tf_py_read_chunk, METH_VARARGS | METH_KEYWORDS,
     tf_read_chunk_doc},
    {"read_chunk_at", (PyCFunction)(void (*)(void))tf_py_read_chunk_at, METH_VARARGS | METH_KEYWORDS,
     tf_read_chunk_at_doc},
    {"resize", (PyCFunction)(void (*)(void))py_resize, METH_VARARGS | METH_KEYWORDS, resize_doc},
    {"run_chunk", (PyCFunction)(void (*)(void))tf_py_run_chunk, METH_VARARGS | METH_KEYWORDS, tf_run_chunk_doc},
    {"run_chunk_at", (PyCFunction)(void (*)(void))tf_py_run_chunk_at, METH_VARARGS | METH_KEYWORDS,
     tf_run_chunk_at_doc},
    {"scan_checks", (PyCFunction)(void (*)(void))tf_py_scan_checks, METH_VARARGS | METH_KEYWORDS,
     tf_scan_checks_doc},
    {"tar_walk", tf_py_tar_walk, METH_VARARGS, tf_tar_walk_doc},
    {"windows", tf_py_windows, METH_VARARGS, tf_windows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crop",
    "JPEG crop-window decode + Pillow-exact antialiased resize into a buffer (libjpeg-turbo).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__crop(void) {
#ifndef _WIN32
    if (!state_key_ok) {
        if (pthread_key_create(&state_key, state_free) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "pthread_key_create failed");
            return NULL;
        }
        state_key_ok = 1;
    }
#endif
    if (!image_too_large) { /* a leaf module: safe while turbofeed itself is still importing */
        PyObject *errors = PyImport_ImportModule("turbofeed.errors");
        if (!errors) return NULL;
        image_too_large = PyObject_GetAttrString(errors, "ImageTooLarge");
        Py_DECREF(errors);
        if (!image_too_large) return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (tf_simd_select("best") < 0 ||
        PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION", tf_jpeg_version()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
