/*
 * source_tfrecord.h — the TFRecord source's internals that its tests and
 * fuzz target reach: the checksum it frames records with. The source itself
 * is opened through the registry (source.h). Never installed.
 */
#ifndef SL_SOURCE_TFRECORD_H
#define SL_SOURCE_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli) of p[0..n), continuing from `crc` (0 to start):
 * sl_source__crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t sl_source__crc32c(uint32_t crc, const void *p, size_t n);
/* TFRecord's masked form of a CRC-32C: rotate right 15, add 0xa282ead8. */
uint32_t sl_source__tf_mask(uint32_t crc);

#endif /* SL_SOURCE_TFRECORD_H */
