/*
 * DLPack's C ABI (the unversioned DLManagedTensor of DLPack 0.x, which
 * torch.from_dlpack and numpy.from_dlpack take), declared here rather than
 * taken from libdlpack-dev: these few structs are all the module uses.
 */
#ifndef FLPY_DLPACK_H
#define FLPY_DLPACK_H

#include <stdint.h>

enum { FLPY_DL_CPU = 1 };
enum {
  FLPY_DL_INT = 0,
  FLPY_DL_UINT = 1,
  FLPY_DL_FLOAT = 2,
  FLPY_DL_BFLOAT = 4,
  FLPY_DL_COMPLEX = 5,
  FLPY_DL_BOOL = 6
};

typedef struct {
  int32_t device_type;
  int32_t device_id;
} flpy_dl_device;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} flpy_dl_dtype;

typedef struct {
  void *data;
  flpy_dl_device device;
  int32_t ndim;
  flpy_dl_dtype dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL: C-contiguous */
  uint64_t byte_offset;
} flpy_dl_tensor;

typedef struct flpy_dl_managed {
  flpy_dl_tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct flpy_dl_managed *self);
} flpy_dl_managed;

/* A capsule's name before and after a consumer took it. */
#define FLPY_DL_CAPSULE "dltensor"
#define FLPY_DL_USED "used_dltensor"

#endif /* FLPY_DLPACK_H */
