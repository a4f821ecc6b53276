/*
 * fuzz_decode.c — the image decode path on untrusted bytes: header parsing,
 * full decode (RGB and gray), and the fused crop + DCT-scaled decode + resize
 * (sl_decode_crop_resize), for every format sl_image_sniff knows (JPEG, PNG;
 * a new format needs only seeds in fuzz/make_decode_corpus.py, since the
 * decoder picks the format by content).
 *
 * Input: the encoded image, then trailing parameter bytes read by
 * fuzz/fuzz_data_producer.h (last byte first): the call (decode, fused with a
 * box, fused without one), colour, interpolation, the crop box (as fractions
 * of the image, or raw, possibly outside it), the output size and the
 * decoder's mode (warnings default, strict or lenient, or default with
 * SL_DECODE_CHECK_ENTROPY).
 * One decoder lives across inputs, as a worker thread's does, so scratch or
 * library state left behind by an earlier input shows: each result is
 * checked against a fresh decoder's. The pixel cap is lowered to 4 Mpx so
 * that a hostile header costs little memory. The contract checked is "an
 * error with a message, or a correct-shaped image equal to a fresh decoder's;
 * never a crash, a hang, a leak or an undefined read".
 */
#include "sluice.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_data_producer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { CALL_DECODE, CALL_FUSED_BOX, CALL_FUSED_WHOLE, NCALLS };

typedef struct {
    int call;
    sl_color color;
    sl_interp interp;
    int raw_box;
    uint16_t frac[4]; /* h, w, y, x as fractions of the image (0..65535) */
    int32_t raw[4];   /* y, x, h, w taken as they are */
    int out_h, out_w;
    int mode; /* 0..2: SL_DECODE_WARNINGS; 3: default + SL_DECODE_CHECK_ENTROPY */
} params;

static void set_mode(sl_decoder *d, int mode) {
    sl_decoder_set(d, SL_DECODE_WARNINGS, mode == 3 ? SL_WARNINGS_DEFAULT : mode);
    sl_decoder_set(d, SL_DECODE_CHECK_ENTROPY, mode == 3);
}

static sl_decoder *new_decoder(void) {
    sl_decoder *d = NULL;
    if (sl_decoder_create(&d) != SL_OK)
        return NULL;
    sl_decoder_set(d, SL_DECODE_MAX_PIXELS, 4 << 20);
    sl_decoder_set(d, SL_DECODE_MAX_SCANS, 100);
    return d;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_decode: %s (%s)\n", what, sl_errmsg());
    abort();
}

/* Run the call the parameters name; the tensor is checked for shape. */
static int run(sl_decoder *d, const uint8_t *data, size_t size, const params *pr, sl_tensor *t) {
    if (pr->call == CALL_DECODE) {
        int rc = sl_decode(d, data, size, pr->color, t);
        if (rc == SL_OK && (t->shape[2] != (int)pr->color ||
                            t->nbytes != (size_t)(t->shape[0] * t->shape[1] * pr->color)))
            fail("sl_decode: wrong shape");
        return rc;
    }
    sl_box b, *box = NULL;
    if (pr->call == CALL_FUSED_BOX) {
        if (pr->raw_box) {
            b.y = pr->raw[0];
            b.x = pr->raw[1];
            b.h = pr->raw[2];
            b.w = pr->raw[3];
        } else {
            sl_image_info info;
            int rc = sl_decode_info(d, data, size, &info);
            if (rc != SL_OK)
                return rc;
            if (info.width <= 0 || info.height <= 0)
                fail("sl_decode_info: an empty image");
            b.h = 1 + (int)((int64_t)(info.height - 1) * pr->frac[0] / 65535);
            b.w = 1 + (int)((int64_t)(info.width - 1) * pr->frac[1] / 65535);
            b.y = (int)((int64_t)(info.height - b.h) * pr->frac[2] / 65535);
            b.x = (int)((int64_t)(info.width - b.w) * pr->frac[3] / 65535);
        }
        box = &b;
    }
    int rc = sl_decode_crop_resize(d, data, size, pr->color, box, pr->out_h, pr->out_w,
                                   pr->interp, t);
    if (rc == SL_OK && (t->shape[0] != pr->out_h || t->shape[1] != pr->out_w ||
                        t->shape[2] != (int)pr->color))
        fail("sl_decode_crop_resize: wrong shape");
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static sl_decoder *shared;
    if (!shared && !(shared = new_decoder()))
        return 0;
    fuzz_producer fp;
    fuzz_producer_init(&fp, data, size);
    params pr;
    memset(&pr, 0, sizeof pr);
    pr.call = (int)fuzz_producer_pick(&fp, NCALLS);
    pr.color = fuzz_producer_bool(&fp) ? SL_COLOR_RGB : SL_COLOR_GRAY;
    pr.interp = (sl_interp)(1 + fuzz_producer_pick(&fp, 3));
    pr.out_h = (int)fuzz_producer_range(&fp, 1, 256);
    pr.out_w = (int)fuzz_producer_range(&fp, 1, 256);
    pr.raw_box = fuzz_producer_range(&fp, 0, 15) == 0;
    for (int i = 0; i < 4; i++)
        pr.frac[i] = (uint16_t)fuzz_producer_range(&fp, 0, 65535);
    if (pr.raw_box)
        for (int i = 0; i < 4; i++)
            pr.raw[i] = (int32_t)(uint32_t)fuzz_producer_range(&fp, 0, UINT32_MAX);
    pr.mode = (int)fuzz_producer_pick(&fp, 4);
    size_t n = 0;
    const uint8_t *img = fuzz_producer_bytes(&fp, fp.size, &n);

    sl_tensor t = {0}, t2 = {0};
    set_mode(shared, pr.mode);
    int rc = run(shared, img, n, &pr, &t);
    if (rc < 0 && sl_errmsg()[0] == '\0')
        fail("a failure without a message");
    /* The same call on a fresh decoder: the same status and the same pixels.
     * (Not under SL_ENOMEM, which may come from a limit the shared decoder
     * reached while growing its scratch.) */
    sl_decoder *fresh = new_decoder();
    if (fresh) {
        set_mode(fresh, pr.mode);
        int rc2 = run(fresh, img, n, &pr, &t2);
        if (rc != SL_ENOMEM && rc2 != SL_ENOMEM) {
            if (rc2 != rc)
                fail("the shared decoder and a fresh one disagree on the status");
            if (rc == SL_OK && (t.nbytes != t2.nbytes || memcmp(t.data, t2.data, t.nbytes)))
                fail("the shared decoder's pixels differ from a fresh one's");
        }
        sl_decoder_free(fresh);
    }
    sl_tensor_release(&t);
    sl_tensor_release(&t2);
    return 0;
}
