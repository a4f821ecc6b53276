/*
 * gen_images.c — writes a synthetic JPEG ImageFolder for sluice's demo and tests.
 *
 *   sluice_gen_images OUTDIR [--count N] [--classes C] [--seed S] [--threads T]
 *                            [--quality Q]
 *
 * writes OUTDIR/class_XX/img_XXXXX.jpg (image i goes to class i % C). Sizes and
 * content are chosen to make JPEG sizes and decode cost resemble photographs: the
 * shorter side is 300-500 px (mean ~375, like ImageNet), aspect ratios mostly 4:3
 * with some 3:4, 1:1 and 3:2, and the picture is multi-octave value noise mapped
 * through a per-class palette, lit by a gradient, overlaid with soft shapes, lines
 * and a striped texture, plus fine sensor-like grain. Encoded by libjpeg-turbo at
 * quality 90 with 4:2:0 chroma subsampling.
 *
 * Output is a pure function of (seed, index, count, classes, quality): every random
 * choice comes from a generator seeded by (seed, image index), so the bytes do not
 * depend on the number of threads or on scheduling. The generator is a small
 * xoshiro256** rather than rand(), whose sequence differs between C libraries.
 *
 * Each file is written to a temporary name and renamed, so an interrupted run never
 * leaves a truncated JPEG under its final name.
 */
#define _GNU_SOURCE 1

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

/* ---- random numbers --------------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t a, uint64_t b) {
    uint64_t x = a * 0xD6E8FEB86659FD93ull ^ (b + 0x632BE59BD9B4E019ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* uniform in [0, 1) with 24 bits, exact in float */
static float rng_f(rng *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

static float rng_range(rng *r, float lo, float hi) { return lo + (hi - lo) * rng_f(r); }

static int rng_int(rng *r, int lo, int hi) { /* inclusive */
    return lo + (int)((rng_next(r) >> 33) % (uint64_t)(hi - lo + 1));
}

/* ---- colours ---------------------------------------------------------------- */

typedef struct {
    float r, g, b;
} rgb;

static rgb hsv(float h, float s, float v) {
    h = h - floorf(h);
    float hh = h * 6.0f, f = hh - floorf(hh);
    float p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    switch ((int)hh % 6) {
    case 0: return (rgb){v, t, p};
    case 1: return (rgb){q, v, p};
    case 2: return (rgb){p, v, t};
    case 3: return (rgb){p, q, v};
    case 4: return (rgb){t, p, v};
    default: return (rgb){v, p, q};
    }
}

#define PALETTE 5

/* A class's palette: hues around a class-specific base hue, so classes are
 * visually distinct (a classifier could learn them) while images within a class
 * still vary. */
static void class_palette(uint64_t seed, int cls, int nclasses, rgb pal[PALETTE]) {
    rng r;
    rng_seed(&r, seed ^ 0xC1A55ull, (uint64_t)cls);
    float base = (float)cls / (float)nclasses + rng_range(&r, -0.03f, 0.03f);
    for (int i = 0; i < PALETTE; i++) {
        float h = base + rng_range(&r, -0.12f, 0.12f);
        float s = rng_range(&r, 0.25f, 0.9f);
        float v = rng_range(&r, 0.15f, 0.95f);
        pal[i] = hsv(h, s, v);
    }
}

static rgb palette_at(const rgb pal[PALETTE], float t) {
    if (t < 0)
        t = 0;
    if (t > 0.9999f)
        t = 0.9999f;
    float u = t * (PALETTE - 1);
    int i = (int)u;
    float f = u - (float)i;
    return (rgb){pal[i].r + (pal[i + 1].r - pal[i].r) * f,
                 pal[i].g + (pal[i + 1].g - pal[i].g) * f,
                 pal[i].b + (pal[i + 1].b - pal[i].b) * f};
}

/* ---- noise ------------------------------------------------------------------ */

/* Adds amp * (value noise with the given cell size) to field[w*h]. Lattice values
 * are drawn up front; per pixel it is one bilinear blend with smoothstep weights
 * (precomputed per column and per row), which keeps 8 octaves of a 0.2 MP image
 * to a few milliseconds. */
static int add_value_noise(float *field, int w, int h, float cell, float amp, rng *r,
                           int *ix, float *tx) {
    int gw = (int)(w / cell) + 3, gh = (int)(h / cell) + 3;
    float *lat = malloc((size_t)gw * (size_t)gh * sizeof *lat);
    if (!lat)
        return -1;
    for (int i = 0; i < gw * gh; i++)
        lat[i] = rng_f(r) * 2.0f - 1.0f;
    float ox = rng_f(r) * cell, oy = rng_f(r) * cell; /* so octaves don't align at 0,0 */
    for (int x = 0; x < w; x++) {
        float fx = ((float)x + ox) / cell;
        int i = (int)fx;
        float t = fx - (float)i;
        ix[x] = i;
        tx[x] = t * t * (3 - 2 * t);
    }
    for (int y = 0; y < h; y++) {
        float fy = ((float)y + oy) / cell;
        int j = (int)fy;
        float t = fy - (float)j;
        t = t * t * (3 - 2 * t);
        const float *l0 = lat + (size_t)j * (size_t)gw, *l1 = l0 + gw;
        float *row = field + (size_t)y * (size_t)w;
        for (int x = 0; x < w; x++) {
            int i = ix[x];
            float a = l0[i] + (l0[i + 1] - l0[i]) * tx[x];
            float b = l1[i] + (l1[i + 1] - l1[i]) * tx[x];
            row[x] += amp * (a + (b - a) * t);
        }
    }
    free(lat);
    return 0;
}

/* Fractal (fBm) noise: octaves from `cell` pixels down to 2, amplitude falling
 * by `persistence` per octave, normalised to roughly [0, 1]. */
static int fbm(float *field, int w, int h, float cell, float persistence, rng *r, int *ix,
               float *tx) {
    memset(field, 0, (size_t)w * (size_t)h * sizeof *field);
    float amp = 1.0f, total = 0.0f;
    for (; cell >= 2.0f; cell *= 0.5f, amp *= persistence) {
        if (add_value_noise(field, w, h, cell, amp, r, ix, tx) != 0)
            return -1;
        total += amp;
    }
    /* value noise sums rarely reach the extremes: scale by ~0.6 of the bound */
    float k = 0.5f / (0.6f * total);
    for (size_t i = 0; i < (size_t)w * (size_t)h; i++)
        field[i] = 0.5f + field[i] * k;
    return 0;
}

/* ---- one image -------------------------------------------------------------- */

typedef struct {
    int w, h;
    float *img;   /* w*h*3, linear 0..1 */
    float *n1;    /* w*h noise */
    float *n2;    /* w*h noise */
    int *ix;      /* w */
    float *tx;    /* w */
    unsigned char *px; /* w*h*3 */
    size_t cap;   /* pixels allocated */
    int cap_w;    /* columns allocated in ix, tx */
} canvas;

static int canvas_reserve(canvas *c, int w, int h) {
    size_t n = (size_t)w * (size_t)h;
    if (n > c->cap || w > c->cap_w) {
        free(c->img);
        free(c->n1);
        free(c->n2);
        free(c->ix);
        free(c->tx);
        free(c->px);
        c->img = malloc(n * 3 * sizeof(float));
        c->n1 = malloc(n * sizeof(float));
        c->n2 = malloc(n * sizeof(float));
        c->ix = malloc((size_t)w * sizeof(int));
        c->tx = malloc((size_t)w * sizeof(float));
        c->px = malloc(n * 3);
        c->cap = n;
        c->cap_w = w;
        if (!c->img || !c->n1 || !c->n2 || !c->ix || !c->tx || !c->px) {
            c->cap = 0;
            c->cap_w = 0;
            return -1;
        }
    }
    c->w = w;
    c->h = h;
    return 0;
}

static void canvas_free(canvas *c) {
    free(c->img);
    free(c->n1);
    free(c->n2);
    free(c->ix);
    free(c->tx);
    free(c->px);
    memset(c, 0, sizeof *c);
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Blend colour c into pixel p with coverage a (0..1), modulated by texture t so
 * shapes keep some surface detail, as objects in photos do. */
static void blend(float *p, rgb c, float a, float t) {
    float s = 0.75f + 0.5f * t;
    p[0] += (c.r * s - p[0]) * a;
    p[1] += (c.g * s - p[1]) * a;
    p[2] += (c.b * s - p[2]) * a;
}

static void draw_ellipse(canvas *c, rng *r, const rgb pal[PALETTE]) {
    int w = c->w, h = c->h, s = w < h ? w : h;
    float cx = rng_range(r, 0, (float)w), cy = rng_range(r, 0, (float)h);
    float rx = rng_range(r, 0.03f, 0.3f) * (float)s, ry = rx * rng_range(r, 0.5f, 1.6f);
    float rot = rng_range(r, 0, 3.14159265f), cs = cosf(rot), sn = sinf(rot);
    rgb col = pal[rng_int(r, 0, PALETTE - 1)];
    float opacity = rng_range(r, 0.5f, 1.0f);
    float ext = (rx > ry ? rx : ry) + 2;
    int x0 = (int)clampf(cx - ext, 0, (float)w), x1 = (int)clampf(cx + ext, 0, (float)w);
    int y0 = (int)clampf(cy - ext, 0, (float)h), y1 = (int)clampf(cy + ext, 0, (float)h);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            float dx = (float)x - cx, dy = (float)y - cy;
            float u = (dx * cs + dy * sn) / rx, v = (-dx * sn + dy * cs) / ry;
            float d = sqrtf(u * u + v * v);
            /* about one pixel of soft edge */
            float a = clampf((1.0f - d) * rx, 0.0f, 1.0f) * opacity;
            if (a > 0) {
                size_t i = (size_t)y * (size_t)w + (size_t)x;
                blend(c->img + 3 * i, col, a, c->n2[i]);
            }
        }
}

static void draw_rect(canvas *c, rng *r, const rgb pal[PALETTE]) {
    int w = c->w, h = c->h;
    int rw = rng_int(r, w / 20, w / 3), rh = rng_int(r, h / 20, h / 3);
    int x0 = rng_int(r, -rw / 2, w - rw / 2), y0 = rng_int(r, -rh / 2, h - rh / 2);
    rgb col = pal[rng_int(r, 0, PALETTE - 1)];
    float opacity = rng_range(r, 0.4f, 0.95f);
    for (int y = y0 < 0 ? 0 : y0; y < y0 + rh && y < h; y++)
        for (int x = x0 < 0 ? 0 : x0; x < x0 + rw && x < w; x++) {
            size_t i = (size_t)y * (size_t)w + (size_t)x;
            blend(c->img + 3 * i, col, opacity, c->n2[i]);
        }
}

static void draw_line(canvas *c, rng *r, const rgb pal[PALETTE]) {
    int w = c->w, h = c->h;
    float ax = rng_range(r, 0, (float)w), ay = rng_range(r, 0, (float)h);
    float bx = rng_range(r, 0, (float)w), by = rng_range(r, 0, (float)h);
    float half = rng_range(r, 0.5f, 4.0f);
    rgb col = pal[rng_int(r, 0, PALETTE - 1)];
    float dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
    if (len2 < 1)
        return;
    int x0 = (int)clampf(fminf(ax, bx) - half - 2, 0, (float)w);
    int x1 = (int)clampf(fmaxf(ax, bx) + half + 2, 0, (float)w);
    int y0 = (int)clampf(fminf(ay, by) - half - 2, 0, (float)h);
    int y1 = (int)clampf(fmaxf(ay, by) + half + 2, 0, (float)h);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            float px = (float)x - ax, py = (float)y - ay;
            float t = clampf((px * dx + py * dy) / len2, 0, 1);
            float ex = px - t * dx, ey = py - t * dy;
            float a = clampf(half + 0.5f - sqrtf(ex * ex + ey * ey), 0, 1);
            if (a > 0) {
                size_t i = (size_t)y * (size_t)w + (size_t)x;
                blend(c->img + 3 * i, col, a, c->n2[i]);
            }
        }
}

/* A patch of stripes (fabric, fences, bark): a sinusoid at a random angle and
 * period, warped by the noise field, inside an elliptical window. */
static void draw_stripes(canvas *c, rng *r, const rgb pal[PALETTE]) {
    int w = c->w, h = c->h, s = w < h ? w : h;
    float cx = rng_range(r, 0, (float)w), cy = rng_range(r, 0, (float)h);
    float rad = rng_range(r, 0.1f, 0.35f) * (float)s;
    float ang = rng_range(r, 0, 3.14159265f), fx = cosf(ang), fy = sinf(ang);
    float period = rng_range(r, 3.0f, 18.0f), warp = rng_range(r, 0.0f, 12.0f);
    rgb col = pal[rng_int(r, 0, PALETTE - 1)];
    int x0 = (int)clampf(cx - rad, 0, (float)w), x1 = (int)clampf(cx + rad, 0, (float)w);
    int y0 = (int)clampf(cy - rad, 0, (float)h), y1 = (int)clampf(cy + rad, 0, (float)h);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            float dx = (float)x - cx, dy = (float)y - cy;
            float d = sqrtf(dx * dx + dy * dy) / rad;
            if (d >= 1)
                continue;
            size_t i = (size_t)y * (size_t)w + (size_t)x;
            float ph = (dx * fx + dy * fy + warp * c->n1[i]) * (6.2831853f / period);
            float a = (0.5f + 0.5f * sinf(ph)) * (1 - d * d) * 0.8f;
            blend(c->img + 3 * i, col, a, c->n2[i]);
        }
}

typedef struct {
    uint64_t seed;
    int nclasses;
    int quality;
    const char *outdir;
} gen_config;

/* Renders image `index` into c->px; returns its class, or -1 when out of memory. */
static int render(const gen_config *g, uint64_t index, canvas *c) {
    rng r;
    rng_seed(&r, g->seed, index);
    int cls = (int)(index % (uint64_t)g->nclasses);

    /* Sizes like ImageNet: short side 300-500 px around 375, aspect mostly 4:3. */
    static const float aspects[] = {4.f / 3, 4.f / 3, 4.f / 3, 4.f / 3, 4.f / 3,
                                    4.f / 3, 3.f / 4, 3.f / 4, 1.f,     3.f / 2};
    float ar = aspects[rng_int(&r, 0, (int)(sizeof aspects / sizeof aspects[0]) - 1)];
    /* sum of three uniforms: a bell around 375 within [300, 450]; a long tail to 500 */
    float u = (rng_f(&r) + rng_f(&r) + rng_f(&r)) / 3.0f;
    int shortside = 300 + (int)(u * 150.0f);
    if (rng_f(&r) < 0.1f)
        shortside = rng_int(&r, 400, 500);
    int w = ar >= 1 ? (int)lroundf((float)shortside * ar) : shortside;
    int h = ar >= 1 ? shortside : (int)lroundf((float)shortside / ar);
    if (canvas_reserve(c, w, h) != 0)
        return -1;

    rgb pal[PALETTE];
    class_palette(g->seed, cls, g->nclasses, pal);
    /* per-image shift of the palette: lighting and white balance vary between photos */
    float gain = rng_range(&r, 0.75f, 1.2f);
    rgb tint = {rng_range(&r, 0.9f, 1.1f), rng_range(&r, 0.9f, 1.1f), rng_range(&r, 0.9f, 1.1f)};
    for (int i = 0; i < PALETTE; i++) {
        pal[i].r *= gain * tint.r;
        pal[i].g *= gain * tint.g;
        pal[i].b *= gain * tint.b;
    }

    int s = w < h ? w : h;
    if (fbm(c->n1, w, h, (float)s * rng_range(&r, 0.4f, 1.0f), rng_range(&r, 0.45f, 0.62f), &r,
            c->ix, c->tx) != 0 ||
        fbm(c->n2, w, h, (float)s * rng_range(&r, 0.05f, 0.25f), rng_range(&r, 0.5f, 0.7f), &r,
            c->ix, c->tx) != 0)
        return -1;

    /* background: palette through the coarse noise, a lighting gradient, and ridged
     * detail from the fine noise */
    float ga = rng_range(&r, 0, 6.2831853f), gx = cosf(ga) / (float)w, gy = sinf(ga) / (float)h;
    float gstr = rng_range(&r, 0.0f, 0.5f), ridge = rng_range(&r, 0.05f, 0.35f);
    float contrast = rng_range(&r, 1.0f, 2.2f);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * (size_t)w + (size_t)x;
            float t = 0.5f + (c->n1[i] - 0.5f) * contrast;
            rgb col = palette_at(pal, t);
            float light = 1.0f + gstr * ((float)x * gx + (float)y * gy);
            float det = 1.0f + ridge * (0.5f - fabsf(2.0f * c->n2[i] - 1.0f));
            float *p = c->img + 3 * i;
            p[0] = col.r * light * det;
            p[1] = col.g * light * det;
            p[2] = col.b * light * det;
        }

    int nshapes = rng_int(&r, 2, 12);
    for (int k = 0; k < nshapes; k++) {
        switch (rng_int(&r, 0, 3)) {
        case 0: draw_ellipse(c, &r, pal); break;
        case 1: draw_rect(c, &r, pal); break;
        case 2: draw_line(c, &r, pal); break;
        default: draw_stripes(c, &r, pal); break;
        }
    }

    /* fine grain, like sensor noise: it is what makes photo JPEGs tens of KB rather
     * than a few; amplitude varies per image as ISO does */
    float grain = rng_range(&r, 2.0f, 7.0f);
    for (size_t i = 0; i < (size_t)w * (size_t)h * 3; i++) {
        /* triangular distribution from two 16-bit draws taken out of one 64-bit */
        uint64_t z = rng_next(&r);
        float nz = ((float)(z & 0xFFFF) + (float)((z >> 16) & 0xFFFF)) / 65535.0f - 1.0f;
        float v = c->img[i] * 255.0f + nz * grain;
        c->px[i] = (unsigned char)clampf(v + 0.5f, 0.0f, 255.0f);
    }
    return cls;
}

/* ---- output ----------------------------------------------------------------- */

static int write_file(const char *path, const unsigned char *data, unsigned long size) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, size, f) == size;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

typedef struct {
    const gen_config *g;
    uint64_t count;
    atomic_uint_fast64_t next;
    atomic_uint_fast64_t done;
    atomic_uint_fast64_t bytes;
    atomic_int failed;
    pthread_mutex_t err_lock;
    char err[4400];
} job;

static void job_fail(job *j, const char *fmt, const char *a, const char *b) {
    pthread_mutex_lock(&j->err_lock);
    if (!atomic_load(&j->failed))
        snprintf(j->err, sizeof j->err, fmt, a, b);
    atomic_store(&j->failed, 1);
    pthread_mutex_unlock(&j->err_lock);
}

static void *worker(void *arg) {
    job *j = arg;
    canvas c = {0};
    tjhandle tj = tjInitCompress();
    if (!tj) {
        job_fail(j, "%s%s", "cannot start the JPEG encoder: ", tjGetErrorStr());
        return NULL;
    }
    unsigned char *jpeg = NULL;
    unsigned long jsize = 0;
    char path[4200];
    for (;;) {
        if (atomic_load(&j->failed))
            break;
        uint64_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->count)
            break;
        int cls = render(j->g, i, &c);
        if (cls < 0) {
            job_fail(j, "%s%s", "out of memory", "");
            break;
        }
        /* tjCompress2 reuses and grows `jpeg` (TJFLAG_NOREALLOC is not set) */
        if (tjCompress2(tj, c.px, c.w, 0, c.h, TJPF_RGB, &jpeg, &jsize, TJSAMP_420, j->g->quality,
                        TJFLAG_ACCURATEDCT) != 0) {
            job_fail(j, "%s%s", "JPEG encoding failed: ", tjGetErrorStr2(tj));
            break;
        }
        snprintf(path, sizeof path, "%s/class_%02d/img_%05llu.jpg", j->g->outdir, cls,
                 (unsigned long long)i);
        if (write_file(path, jpeg, jsize) != 0) {
            job_fail(j, "cannot write %s: %s", path, strerror(errno));
            break;
        }
        atomic_fetch_add(&j->bytes, jsize);
        atomic_fetch_add(&j->done, 1);
    }
    tjFree(jpeg);
    tjDestroy(tj);
    canvas_free(&c);
    return NULL;
}

static int mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return -1;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++)
        if (buf[i] == '/' || buf[i] == 0) {
            char ch = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            buf[i] = ch;
        }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice_gen_images OUTDIR [--count N] [--classes C] [--seed S]\n"
            "                         [--threads T] [--quality Q]\n"
            "Writes OUTDIR/class_XX/img_XXXXX.jpg: N photo-like JPEGs (default 3000) in C\n"
            "classes (default 10), short side 300-500 px, quality Q (default 90), 4:2:0.\n"
            "Same seed (default 1), same bytes, whatever T (default: all cores).\n");
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    const char *outdir = NULL;
    uint64_t count = 3000, classes = 10, seed = 1, quality = 90;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t threads = nc > 0 ? (uint64_t)nc : 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t *dst = NULL, lo = 1, hi = 99999;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--count")) {
            dst = &count;
        } else if (!strcmp(a, "--classes")) {
            dst = &classes;
            hi = 100; /* class_00 .. class_99 */
        } else if (!strcmp(a, "--seed")) {
            dst = &seed;
            lo = 0;
            hi = UINT64_MAX;
        } else if (!strcmp(a, "--threads")) {
            dst = &threads;
            hi = 256;
        } else if (!strcmp(a, "--quality")) {
            dst = &quality;
            hi = 100;
        } else if (a[0] == '-' || outdir) {
            fprintf(stderr, "sluice_gen_images: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            outdir = a;
            continue;
        }
        if (i + 1 >= argc || parse_u64(argv[i + 1], lo, hi, dst) != 0) {
            fprintf(stderr, "sluice_gen_images: %s needs a number in [%llu, %llu]\n", a,
                    (unsigned long long)lo, (unsigned long long)hi);
            return 2;
        }
        i++;
    }
    if (!outdir) {
        usage(stderr);
        return 2;
    }
    if (strlen(outdir) > 4000) {
        fprintf(stderr, "sluice_gen_images: output path too long\n");
        return 2;
    }
    if (classes > count) {
        fprintf(stderr, "sluice_gen_images: --classes %llu exceeds --count %llu\n",
                (unsigned long long)classes, (unsigned long long)count);
        return 2;
    }

    char dir[4200];
    for (uint64_t k = 0; k < classes; k++) {
        snprintf(dir, sizeof dir, "%s/class_%02llu", outdir, (unsigned long long)k);
        if (mkdir_p(dir) != 0) {
            fprintf(stderr, "sluice_gen_images: cannot create %s: %s\n", dir, strerror(errno));
            return 1;
        }
    }

    gen_config g = {seed, (int)classes, (int)quality, outdir};
    job j = {.g = &g, .count = count};
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);
    atomic_init(&j.bytes, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.err_lock, NULL);
    if (threads > count)
        threads = count;

    double t0 = now_s();
    pthread_t tids[256];
    uint64_t started = 0;
    for (; started < threads; started++)
        if (pthread_create(&tids[started], NULL, worker, &j) != 0)
            break;
    if (started == 0)
        worker(&j);
    int tty = isatty(2) && !getenv("SLUICE_NO_PROGRESS");
    while (tty && atomic_load(&j.done) < count && !atomic_load(&j.failed)) {
        uint64_t d = atomic_load(&j.done);
        fprintf(stderr, "\rgenerating %llu/%llu images (%.0f%%)", (unsigned long long)d,
                (unsigned long long)count, 100.0 * (double)d / (double)count);
        fflush(stderr);
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        /* the workers may all have stopped without finishing (failure above) */
    }
    for (uint64_t k = 0; k < started; k++)
        pthread_join(tids[k], NULL);
    if (tty)
        fprintf(stderr, "\r\033[K");
    pthread_mutex_destroy(&j.err_lock);
    if (atomic_load(&j.failed)) {
        fprintf(stderr, "sluice_gen_images: %s\n", j.err);
        return 1;
    }
    double secs = now_s() - t0;
    uint64_t bytes = atomic_load(&j.bytes);
    printf("wrote %llu images in %llu classes to %s: %.1f MB, mean %.1f KB, %.1f s (%llu "
           "threads)\n",
           (unsigned long long)count, (unsigned long long)classes, outdir, (double)bytes / 1e6,
           (double)bytes / 1e3 / (double)count, secs, (unsigned long long)started);
    return 0;
}
