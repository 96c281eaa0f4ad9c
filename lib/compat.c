/*
 * The entry points of forkload 0.1, kept so that programs built against
 * it run with this library unchanged.  0.1 passed no struct sizes: these
 * pass the sizes its structs had.  The header turns these names into
 * macros for the sized functions, so new programs never reach them.
 */
#include "config.h"

#include "internal.h"

#undef fl_options_init
#undef fl_loader_create
#undef fl_loader_create_iterable
#undef fl_loader_stats
#undef fl_dataset_npy_dir
#undef fl_dataset_npy_array
#undef fl_dataset_raw
#undef fl_dataset_close

FL_EXTERN void fl_options_init(fl_options *opt);
FL_EXTERN int fl_loader_create(fl_loader **out, const fl_dataset *ds,
                               const fl_options *opt);
FL_EXTERN int fl_loader_create_iterable(fl_loader **out,
                                        const fl_iterable *it,
                                        const fl_options *opt);
FL_EXTERN int fl_loader_stats(const fl_loader *l, fl_stats *out);
FL_EXTERN int fl_dataset_npy_dir(fl_dataset *out, const char *dir);
FL_EXTERN int fl_dataset_npy_array(fl_dataset *out, const char *path);
FL_EXTERN int fl_dataset_raw(fl_dataset *out, const char *path,
                             size_t record_bytes, size_t header_bytes);
FL_EXTERN void fl_dataset_close(fl_dataset *ds);

void
fl_options_init(fl_options *opt)
{
  fl_options_init_sized(opt, FL__OPTIONS_SIZE_0_1);
}

int
fl_loader_create(fl_loader **out, const fl_dataset *ds, const fl_options *opt)
{
  return fl_loader_create_sized(out, ds, FL__DATASET_SIZE_0_1, opt,
                                FL__OPTIONS_SIZE_0_1);
}

int
fl_loader_create_iterable(fl_loader **out, const fl_iterable *it,
                          const fl_options *opt)
{
  return fl_loader_create_iterable_sized(out, it, FL__ITERABLE_SIZE_0_1, opt,
                                         FL__OPTIONS_SIZE_0_1);
}

int
fl_loader_stats(const fl_loader *l, fl_stats *out)
{
  return fl_loader_stats_sized(l, out, FL__STATS_SIZE_0_1);
}

int
fl_dataset_npy_dir(fl_dataset *out, const char *dir)
{
  return fl_dataset_npy_dir_sized(out, FL__DATASET_SIZE_0_1, dir);
}

int
fl_dataset_npy_array(fl_dataset *out, const char *path)
{
  return fl_dataset_npy_array_sized(out, FL__DATASET_SIZE_0_1, path);
}

int
fl_dataset_raw(fl_dataset *out, const char *path, size_t record_bytes,
               size_t header_bytes)
{
  return fl_dataset_raw_sized(out, FL__DATASET_SIZE_0_1, path, record_bytes,
                              header_bytes);
}

void
fl_dataset_close(fl_dataset *ds)
{
  fl_dataset_close_sized(ds, FL__DATASET_SIZE_0_1);
}
