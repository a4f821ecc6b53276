/*
 * record_hash.c — the checksum of large blocks, through libxxhash's run-time
 * CPU dispatch where the library provides it.
 *
 * Why not only the inline XXH3 (record_common.c): inlined, XXH3 is compiled
 * for the build's baseline ISA (SSE2 on x86-64, ~20 GB/s), while the
 * library's dispatching entry point picks AVX2/AVX-512 at run time (~55 GB/s
 * here). Verifying record checksums is most of the cost of a sequential read
 * from page cache, so large payloads go through the dispatcher. The result is
 * the same function either way (XXH3-64 is defined bit for bit).
 * This file does not define XXH_INLINE_ALL: the dispatch header declares
 * exported functions, which the inline mode would turn into static ones.
 */
#include "record/record_format.h"

#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define SLR_XXH_DISPATCH 1
#endif
#endif
#ifndef SLR_XXH_DISPATCH
#include <xxhash.h>
#endif

uint64_t sl_record__hash_large(const void *p, size_t len, uint64_t seed) {
#ifdef SLR_XXH_DISPATCH
    return (uint64_t)XXH3_64bits_withSeed_dispatch(p, len, (XXH64_hash_t)seed);
#else
    return (uint64_t)XXH3_64bits_withSeed(p, len, (XXH64_hash_t)seed);
#endif
}
