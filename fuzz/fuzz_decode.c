/*
 * fuzz_decode.c — the image decode path on untrusted bytes: header parsing,
 * full decode (RGB and gray), and the fused crop + DCT-scaled decode + resize.
 *
 * Input layout: 4 parameter bytes, then the encoded image.
 *   byte 0: bit 0 colour (gray/rgb), bits 1-2 interpolation, bit 3 fused path
 *   byte 1..3: crop box and output size as fractions of the image
 * The decoder's pixel cap is lowered to 4 Mpx so that a hostile header costs
 * little memory; the contract checked is "an error or a correct-shaped image,
 * never a crash, a hang, a leak or an undefined read".
 */
#include "sluice.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4)
        return 0;
    uint8_t p0 = data[0], p1 = data[1], p2 = data[2], p3 = data[3];
    data += 4;
    size -= 4;
    sl_decoder *d = NULL;
    if (sl_decoder_create(&d) != SL_OK)
        return 0;
    sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 4 << 20);
    sl_decoder_set(d, SL_DECODE_MAX_SCANS, 100);
    sl_color color = (p0 & 1) ? SL_COLOR_RGB : SL_COLOR_GRAY;
    sl_interp interp = (sl_interp)(1 + ((p0 >> 1) & 3) % 3);
    sl_image_info info;
    int rc = sl_decode_info(d, data, size, &info);
    if (rc == SL_OK && (info.width <= 0 || info.height <= 0))
        abort();
    sl_tensor t = {0};
    if (p0 & 8) {
        if (rc == SL_OK) {
            sl_box b;
            b.w = 1 + (int)((int64_t)(info.width - 1) * p1 / 255);
            b.h = 1 + (int)((int64_t)(info.height - 1) * p2 / 255);
            b.x = (int)((int64_t)(info.width - b.w) * p3 / 255);
            b.y = (int)((int64_t)(info.height - b.h) * (255 - p3) / 255);
            int oh = 1 + (p1 ^ p3) % 96, ow = 1 + (p2 ^ p3) % 96;
            rc = sl_decode_crop_resize(d, data, size, color, &b, oh, ow, interp, &t);
            if (rc == SL_OK && (t.shape[0] != oh || t.shape[1] != ow || t.shape[2] != (int)color))
                abort();
        }
    } else {
        rc = sl_decode(d, data, size, color, &t);
        if (rc == SL_OK) {
            if (t.shape[2] != (int)color || t.nbytes != (size_t)(t.shape[0] * t.shape[1] * color))
                abort();
            /* read every byte so that uninitialised output shows under MSan */
            volatile uint8_t acc = 0;
            for (size_t i = 0; i < t.nbytes; i++)
                acc ^= ((const uint8_t *)t.data)[i];
            (void)acc;
        }
    }
    if (rc < 0 && sl_errmsg()[0] == '\0')
        abort(); /* every failure has a message */
    sl_tensor_release(&t);
    sl_decoder_free(d);
    return 0;
}
