/* What the dataset index reads from a tar shard, without Python (tarindex.c): the walk
 * over the 512-byte headers of a plain shard, and the bytes of many members at once
 * (the labels), each through a window of positional reads. No Python: the bindings
 * (module_index.c) call these with the GIL released. */
#ifndef TF_TARINDEX_H
#define TF_TARINDEX_H

#include <stddef.h>
#include <stdint.h>

/* Return codes. TF_IO: a read failed (errno says why) or the file ended before a member
 * it was asked for. */
enum { TF_TAR_PLAIN = 0, TF_TAR_NOT_PLAIN = 1, TF_IO = 2, TF_NOMEM = 3 };

/* Positional reads of one file through one buffer: a read inside the buffer costs no
 * system call; one that continues it reads twice as much as the last (up to 1 MiB),
 * one elsewhere 4 KiB (so shards of large images are not read whole). */
typedef struct {
    int fd;
    int64_t start;     /* file offset of buf[0] */
    size_t len, cap;   /* bytes held, bytes allocated */
    size_t chunk;      /* the last read's size */
    unsigned char *buf;
} TfWindow;

void tf_window_init(TfWindow *w, int fd);
void tf_window_free(TfWindow *w);
/* The n bytes at offset (fewer at the end of the file: *got), or NULL (TF_IO with errno,
 * or TF_NOMEM, in *rc). */
const unsigned char *tf_window_read(TfWindow *w, int64_t offset, size_t n, size_t *got, int *rc);

/* The regular files of a tar shard, in order: name i is names[name_end[i-1]:name_end[i]]
 * (raw bytes: the prefix field, "/", the name field, as tarfile joins them), its data at
 * offset[i], size[i] bytes. */
typedef struct {
    unsigned char *names;
    size_t names_len, names_cap;
    int64_t *name_end, *offset, *size;
    size_t count, cap;
} TfMembers;

void tf_members_free(TfMembers *m);

/* Walk the headers of the shard open as fd (file_size bytes). TF_TAR_PLAIN with the
 * members when the shard is plain and whole, exactly when turbofeed.io.local.tarscan.
 * fast_members answers (regular files and directories in ustar/v7/GNU headers without
 * extensions, every numeric field octal digits and spaces, every checksum right, every
 * member inside the file, an end-of-archive block before the file ends); else
 * TF_TAR_NOT_PLAIN (the caller asks tarfile), TF_IO or TF_NOMEM. */
int tf_tar_walk(int fd, int64_t file_size, TfMembers *out);

/* The bytes of n members (offset[i], size[i]) one after another into out (the sum of
 * the sizes): TF_TAR_PLAIN, TF_IO (a read failed, or the file is shorter) or TF_NOMEM. */
int tf_gather(int fd, const int64_t *offset, const int64_t *size, size_t n, unsigned char *out);

#endif
