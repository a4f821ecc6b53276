/*
 * crc32c.c — CRC-32C (Castagnoli), the checksum TFRecord frames records with
 * (and the one a remote object store reports for its objects).
 *
 * Debian has no C library for CRC-32C (apt-cache search crc32c finds only a
 * Python module), and zlib's crc32 is the other polynomial. The SSE4.2 crc32
 * instruction computes exactly this one; a table serves other CPUs.
 */
#include "core/core.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

static uint32_t crc_table[256];
static int crc_have_sse42;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
    crc_have_sse42 = (sl__cpu_features() & SL_CPU_SSE42) != 0;
}

#if defined(__x86_64__)
/* crc32: clang counts the instruction as a feature of its own, which
 * sse4.2 does not imply there */
__attribute__((target("sse4.2,crc32"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p,
                                                          size_t n) {
    uint64_t c64 = c;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
    }
    c = (uint32_t)c64;
    for (; n; p++, n--)
        c = _mm_crc32_u8(c, *p);
    return c;
}
#endif

uint32_t sl__crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = data;
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc_have_sse42)
        return ~crc_hw(c, p, n);
#endif
    for (; n; p++, n--)
        c = crc_table[(c ^ *p) & 0xff] ^ (c >> 8);
    return ~c;
}
