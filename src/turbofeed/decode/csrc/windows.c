/* Crop windows of a chunk (windows.h). Each op mirrors its pure Python form in
 * turbofeed/transforms/geometry.py (and views.py's View.sub_box) operation for
 * operation: the build turns off floating-point contraction (-ffp-contract=off), sqrt
 * and division are correctly rounded in both, Python's round() is C's rint() (half to
 * even), int() of a non-negative double is a cast, and the one transcendental function,
 * exp, comes from tables Python filled with math.exp. */
#include "windows.h"

#include <math.h>

#define G 0x9E3779B97F4A7C15ULL
#define RATIO_BITS 24 /* geometry.py: _RATIO_BITS, _LOW_BITS */
#define LOW_BITS 12
#define TABLE (1 << LOW_BITS)

uint64_t tf_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Draw k of the sample whose key is key (draws.py: Draws.__getitem__). */
static double draw(uint64_t key, long long k) {
    return (double)(tf_mix(key + (uint64_t)(k + 1) * G) >> 11) * 0x1.0p-53;
}

typedef struct {
    double x0, y0, x1, y1;
    long long height, width;
} View;

/* View.sub_box: the part [top, top + h) x [left, left + w) of the view, same scale. */
static void sub_box(View *v, long long top, long long left, long long h, long long w) {
    const double sx = (v->x1 - v->x0) / (double)v->width, sy = (v->y1 - v->y0) / (double)v->height;
    const double x0 = v->x0, y0 = v->y0;
    v->x0 = x0 + (double)left * sx;
    v->y0 = y0 + (double)top * sy;
    v->x1 = x0 + (double)(left + w) * sx;
    v->y1 = y0 + (double)(top + h) * sy;
}

static void resize_short(View *v, long long size) {
    const long long h = v->height, w = v->width;
    const long long shorter = h <= w ? h : w, longer = h <= w ? w : h;
    const long long other = (long long)((double)size * (double)longer / (double)shorter);
    v->height = h <= w ? size : other;
    v->width = h <= w ? other : size;
}

static void center_crop(View *v, long long ch, long long cw) {
    const long long h = ch < v->height ? ch : v->height, w = cw < v->width ? cw : v->width;
    const long long top = (long long)rint((double)(v->height - h) / 2.0);
    const long long left = (long long)rint((double)(v->width - w) / 2.0);
    sub_box(v, top, left, h, w);
    v->height = ch;
    v->width = cw;
}

/* RandomResizedCrop.params, then the crop resized to (out_h, out_w). */
static void random_resized_crop(View *v, const double *op, const double *prog, uint64_t key) {
    const long long height = v->height, width = v->width, first = (long long)op[7];
    const double *high = prog + (size_t)op[8], *low_table = high + TABLE;
    const double area = (double)height * (double)width, low = op[3], span = op[4] - op[3];
    long long top = 0, left = 0, h = 0, w = 0;
    int found = 0;
    for (int i = 0; i < 10 && !found; i++) {
        const double target = area * (low + span * draw(key, first + i));
        const long long q = (long long)(draw(key, first + 10 + i) * (double)(1 << RATIO_BITS));
        const double aspect = high[q >> LOW_BITS] * low_table[q & (TABLE - 1)];
        w = (long long)rint(sqrt(target * aspect));
        h = (long long)rint(sqrt(target / aspect));
        if (0 < w && w <= width && 0 < h && h <= height) {
            top = (long long)(draw(key, first + 20) * (double)(height - h + 1));
            left = (long long)(draw(key, first + 21) * (double)(width - w + 1));
            found = 1;
        }
    }
    if (!found) { /* torchvision's fallback: a central crop with the ratio clamped */
        const double in_ratio = (double)width / (double)height;
        if (in_ratio < op[5]) {
            w = width;
            h = (long long)rint((double)width / op[5]);
        } else if (in_ratio > op[6]) {
            h = height;
            w = (long long)rint((double)height * op[6]);
        } else {
            w = width;
            h = height;
        }
        top = (height - h) / 2; /* non-negative: Python's floor division */
        left = (width - w) / 2;
    }
    sub_box(v, top, left, h, w);
    v->height = (long long)op[1];
    v->width = (long long)op[2];
}

int tf_program_check(const double *prog, size_t len) {
    if (len < 4 || prog[0] != TF_PROGRAM_VERSION || prog[1] < 0) return -1;
    const size_t ops = (size_t)prog[1];
    if (len < 4 + ops * TF_OP_WORDS) return -1;
    for (size_t k = 0; k < ops; k++) {
        const double *op = prog + 4 + k * TF_OP_WORDS;
        const int code = (int)op[0];
        if (code < TF_OP_RESIZE_SHORT || code > TF_OP_RRC) return -1;
        for (int a = 1; a < (code == TF_OP_RESIZE_SHORT ? 2 : 3); a++)
            if (!(op[a] >= 1 && op[a] <= (1 << 30))) return -1;
        if (code == TF_OP_RRC && !(op[7] >= 0 && op[8] >= 4 && op[8] + 2 * TABLE <= (double)len && op[3] > 0 &&
                                   op[4] >= op[3] && op[5] > 0 && op[6] >= op[5]))
            return -1;
    }
    return 0;
}

void tf_windows(const double *prog, uint64_t epoch_key, size_t n, const int64_t *gids, const int32_t *heights,
                const int32_t *widths, double *boxes, int64_t *sizes, uint8_t *flips) {
    const size_t ops = (size_t)prog[1];
    const long long flip_column = (long long)prog[2];
    for (size_t i = 0; i < n; i++) {
        const uint64_t key = tf_mix(epoch_key ^ (uint64_t)gids[i]);
        View v = {0.0, 0.0, (double)widths[i], (double)heights[i], heights[i], widths[i]};
        for (size_t k = 0; k < ops; k++) {
            const double *op = prog + 4 + k * TF_OP_WORDS;
            switch ((int)op[0]) {
                case TF_OP_RESIZE_SHORT: resize_short(&v, (long long)op[1]); break;
                case TF_OP_RESIZE: v.height = (long long)op[1], v.width = (long long)op[2]; break;
                case TF_OP_CENTER_CROP: center_crop(&v, (long long)op[1], (long long)op[2]); break;
                default: random_resized_crop(&v, op, prog, key); break;
            }
        }
        boxes[4 * i] = v.x0, boxes[4 * i + 1] = v.y0, boxes[4 * i + 2] = v.x1, boxes[4 * i + 3] = v.y1;
        sizes[2 * i] = v.height, sizes[2 * i + 1] = v.width;
        flips[i] = flip_column >= 0 && draw(key, flip_column) < prog[3];
    }
}
