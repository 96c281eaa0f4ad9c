/*
 * Which SIMD extensions this x86 CPU and its kernel run, read with CPUID
 * and XGETBV, for the resize kernels' choice (resample.c).  Not
 * __builtin_cpu_supports: the compiler's runtime answers it, and zig's
 * (the wheel's compiler, tools/wheel.sh) answers no to every extension,
 * which left the wheel's resize on the portable C kernels, 2.7 times
 * slower.  An extension that widens the registers counts only where the
 * kernel saves their state (XCR0), as the compilers' own checks do.
 */
#include "config.h"

#include "decode.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

#define FL__CPU_KNOWN 0x80000000u

static unsigned
features(void)
{
  unsigned a, b, c, d, max, f = 0, xcr0 = 0;

  max = __get_cpuid_max(0, NULL);
  if (max < 1 || !__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  if (c & bit_SSE4_1)
    f |= FL__CPU_SSE41;
  if (c & bit_OSXSAVE) {
    unsigned hi;

    /* xgetbv by its bytes: no -mxsave needed to assemble it. */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(xcr0), "=d"(hi) : "c"(0));
    (void)hi;
  }
  /* SSE and AVX state (XCR0 bits 1, 2); AVX-512's adds bits 5 to 7. */
  if ((xcr0 & 0x6) != 0x6)
    return f;
  if (c & bit_FMA)
    f |= FL__CPU_FMA;
  if (max < 7)
    return f;
  __cpuid_count(7, 0, a, b, c, d);
  if (b & bit_AVX2)
    f |= FL__CPU_AVX2;
  if ((xcr0 & 0xe6) != 0xe6)
    return f;
  if (b & bit_AVX512F)
    f |= FL__CPU_AVX512F;
  if (b & bit_AVX512BW)
    f |= FL__CPU_AVX512BW;
  if (c & bit_AVX512VBMI)
    f |= FL__CPU_AVX512VBMI;
  return f;
}

/* Read once: CPUID exits to the hypervisor in a VM (microseconds), and the
   answer never changes.  A race reads it twice, to the same value. */
unsigned
fl__cpu_features(void)
{
  static unsigned known; /* the features | FL__CPU_KNOWN, or 0 */
  unsigned f = __atomic_load_n(&known, __ATOMIC_RELAXED);

  if (f == 0) {
    f = features() | FL__CPU_KNOWN;
    __atomic_store_n(&known, f, __ATOMIC_RELAXED);
  }
  return f & ~FL__CPU_KNOWN;
}
#else
unsigned
fl__cpu_features(void)
{
  return 0;
}
#endif
