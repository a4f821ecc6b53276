/*
 * source_tfrecord.h — the TFRecord source's internals that its tests and
 * fuzz target reach: the mask it frames records' CRC-32C with. The source itself
 * is opened through the registry (source.h). Never installed.
 */
#ifndef SL_SOURCE_TFRECORD_H
#define SL_SOURCE_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

/* TFRecord's masked form of a CRC-32C (sl__crc32c, core.h): rotate right 15,
 * add 0xa282ead8. */
uint32_t sl_source__tf_mask(uint32_t crc);

#endif /* SL_SOURCE_TFRECORD_H */
