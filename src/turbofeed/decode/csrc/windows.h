/* Crop windows of a chunk of samples (windows.c): the geometric ops of a
 * turbofeed.transforms.Compose, compiled by Python into a program of doubles, run here
 * on the counter-based draws of each sample, with the same floating-point operations in
 * the same order as the pure Python form (Compose.window), so the windows are the same
 * to the bit. No Python. */
#ifndef TF_WINDOWS_H
#define TF_WINDOWS_H

#include <stddef.h>
#include <stdint.h>

/* The program (turbofeed/transforms/program.py writes it): doubles,
 *   [0] TF_PROGRAM_VERSION, [1] op count, [2] flip column (-1: none), [3] flip p,
 * then TF_OP_WORDS doubles per op: code, then its arguments:
 *   TF_OP_RESIZE_SHORT  size
 *   TF_OP_RESIZE        height, width
 *   TF_OP_CENTER_CROP   height, width
 *   TF_OP_RRC           height, width, scale lo, scale hi, ratio lo, ratio hi, first column,
 *                       index of its two 4096-entry exp tables (high then low) in the program
 * then the tables. */
#define TF_PROGRAM_VERSION 1
#define TF_OP_WORDS 10
enum { TF_OP_RESIZE_SHORT = 1, TF_OP_RESIZE = 2, TF_OP_CENTER_CROP = 3, TF_OP_RRC = 4 };

/* splitmix64's finaliser (turbofeed/transforms/draws.py: mix). */
uint64_t tf_mix(uint64_t z);

/* Check a program of len doubles: 0, or -1 when it is malformed (bad version, count,
 * code, column or table index). */
int tf_program_check(const double *prog, size_t len);

/* The windows of n samples: sample i (id gids[i], an image of heights[i] x widths[i])
 * gets boxes[4i..4i+3], its output size sizes[2i] (height), sizes[2i+1] (width) and
 * flips[i], from its draws under epoch_key (draws.py: epoch_key(seed, epoch)). */
void tf_windows(const double *prog, uint64_t epoch_key, size_t n, const int64_t *gids, const int32_t *heights,
                const int32_t *widths, double *boxes, int64_t *sizes, uint8_t *flips);

#endif
