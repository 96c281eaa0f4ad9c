/*
 * The image stage, private to the built-in datasets: encoded bytes in (a
 * JPEG, PNG, WebP, TIFF, BMP or PNM file, a tar member, a database
 * value), one transformed image out, as fl_image_options asks.  Any
 * dataset whose samples are encoded images composes with it.  A stage is
 * made before the fork; its scratch (decoder state, row buffers,
 * coefficients) is allocated by whichever process first runs it and
 * reused for every later image, so the steady state allocates nothing per
 * sample.  One stage serves one thread.
 */
#ifndef FL_IMAGE_H
#define FL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "forkload.h"

struct fl__image_stage;

/* Checks io (io_size bytes of the caller's struct, by the ABI rule) and
   makes a stage; fn names the caller in the error (fl__error_set).
   FL_ENOTSUP where this build has neither decoder. */
int fl__image_stage_new(struct fl__image_stage **out,
                        const fl_image_options *io, size_t io_size,
                        const char *fn);
/* The bytes of one output image (the field's size). */
size_t fl__image_stage_bytes(const struct fl__image_stage *st);
/* Decode data (n bytes; name: the file, for messages), transform it with
   the randomness of seed (fl_sample_seed of the sample) and write the
   image to dst.  0, or FL_EDATASET with fl_worker_error naming the file
   and what is wrong with it. */
int fl__image_stage_run(struct fl__image_stage *st, const void *data,
                        size_t n, uint64_t seed, void *dst, const char *name);
void fl__image_stage_free(struct fl__image_stage *st);
/* From now on, crop every image at this box (and flip it if flip is set)
   and resize it to the output, as torchvision's F.resized_crop, instead of
   drawing the crop: how a test compares with torchvision's pixels for
   the same crop. */
void fl__image_stage_force(struct fl__image_stage *st, unsigned top,
                           unsigned left, unsigned height, unsigned width,
                           int flip);

/* The resize kernels the stage runs: "c", "sse4.1", "avx2", "avx512" or
   "avx512vbmi", the best this CPU has, or at most the one FL_IMAGE_SIMD
   names when the stage is made (how a test checks that every path gives
   the same bytes), and how its last image's horizontal pass went
   (fl__resample_horizontal). */
const char *fl__image_stage_kernels(const struct fl__image_stage *st);
const char *fl__image_stage_horizontal(const struct fl__image_stage *st);

/* Whether name ends with one of torchvision's image extensions
   (IMG_EXTENSIONS), compared without case. */
int fl__image_extension(const char *name);

#endif /* FL_IMAGE_H */
