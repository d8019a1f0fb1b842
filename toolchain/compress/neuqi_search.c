/* NeUQI's per-group scale search, compiled: the algorithm of neuqi.py (_Search.run, lloyd_zero, _Phases, _exact),
 * one group at a time instead of as batched tensor passes. neuqi.py's module docstring derives it; its PyTorch code
 * is the reference this file is tested against (tests/compress/test_neuqi_kernel.py).
 *
 * Why a kernel: the batched PyTorch search streams every [groups, n] temporary through memory once per operation
 * (about 14 passes per Lloyd-scored candidate); here a group's 64 weights stay in registers for all its candidates.
 *
 * Reproducibility: every sum over a group's elements goes through LANES fixed partial sums added in a fixed order,
 * and the build turns off floating-point contraction (-ffp-contract=off), so the result does not depend on the
 * vector width the compiler picks (SSE, AVX2, AVX-512) nor on the thread count (groups are independent).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16
#define FP16_TINY 5.9604644775390625e-08f /* 2^-24 */

/* s_minmax * i / T as the float16 the checkpoint stores (neuqi._fp16_scale). */
static float fp16_scale(float smm, int i, int T) {
    float s = smm * (float)i / (float)T;
    if (s < FP16_TINY) s = FP16_TINY;
    return (float)(_Float16)s;
}


static float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

/* GCC/Clang vector extensions: LANES floats per operation whatever the target's width (the compiler splits them). */
typedef float vf __attribute__((vector_size(4 * LANES)));
typedef int vi __attribute__((vector_size(4 * LANES)));

static vf load(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A fixed pairwise tree over the lanes (the same sum whatever the vector width; 4 dependent adds instead of 15). */
static float lane_sum(vf a) {
    float t[LANES];
    memcpy(t, &a, sizeof t);
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) t[l] += t[l + w];
    return t[0];
}

/* clamp(roundeven(y), 0, q) for every finite y: adding and subtracting 1.5 * 2^23 rounds to the nearest integer
 * (ties to even) exactly where |y| < 2^22, and beyond that only the sign matters once clamped (q <= 255). */
static vf code(vf y, float q) {
    vf r = (y + 12582912.0f) - 12582912.0f;
    vi below = r < 0.0f, above = r > q;
    vf qv = (vf){0} + q;
    return (vf)(((vi)r & ~(below | above)) | ((vi)qv & above));
}

/* lloyd_zero: `iters` Lloyd steps from z over x[0..npad) (padding has h = 0); returns the loss of the last codes at
 * their best offset, that offset in *zout. */
static float lloyd(const float *x, const float *h, int npad, float q, float z, int iters, float invH, float *zout) {
    float s1 = 0.0f, s2 = 0.0f, dz = 0.0f;
    for (int it = 0; it < iters; it++) {
        vf a1 = {0}, a2 = {0};
        for (int b = 0; b < npad; b += LANES) {
            vf y = load(x + b) - z;
            vf e = y - code(y, q);
            vf he = load(h + b) * e;
            a1 += he;
            a2 += he * e;
        }
        s1 = lane_sum(a1);
        s2 = lane_sum(a2);
        dz = s1 * invH;
        z = z + dz;
    }
    *zout = z;
    float loss = s2 - s1 * dz;
    return loss > 0.0f ? loss : 0.0f;
}

/* ---- exact zero-point (neuqi._Phases and neuqi._exact) ---- */

typedef struct {
    int n;
    float q, H, invH, M1P, M2P;
    float *ps, *hs, *ms, *xs, *hp2, *w1, *ha, *hpa, *key;
    int *idx;
    uint64_t *keys;
} Phases;

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Order by (phase, index), the PyTorch path's order, so ties break the same way. Small groups: each element's rank
 * is the number of elements before it (branch-free comparisons, vectorised); large ones (a whole row as the group):
 * qsort of (phase bits, index) keys, as non-negative floats order like their bit patterns. */
static void sort_phases(Phases *P, const float *phi) {
    int n = P->n;
    if (n <= 256) {
        for (int i = 0; i < n; i++) {
            float p = phi[i];
            int r = 0;
            for (int j = 0; j < n; j++) r += (phi[j] < p) | ((phi[j] == p) & (j < i));
            P->idx[r] = i;
        }
        return;
    }
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &phi[i], sizeof bits);
        P->keys[i] = (uint64_t)bits << 32 | (uint32_t)i;
    }
    qsort(P->keys, (size_t)n, sizeof P->keys[0], cmp_u64);
    for (int i = 0; i < n; i++) P->idx[i] = (int)(P->keys[i] & 0xFFFFFFFFu);
}

static void phases_init(Phases *P, const float *x, const float *h) {
    int n = P->n;
    float *phi = P->key, *m = P->ha;     /* ha/hpa are free until the first level */
    for (int i = 0; i < n; i++) {
        float a = x[i] - 0.5f;
        m[i] = floorf(a);
        phi[i] = a - m[i];
    }
    sort_phases(P, phi);
    float H = 0.0f, S1 = 0.0f, S2 = 0.0f;
    for (int k = 0; k < n; k++) {
        int i = P->idx[k];
        P->ps[k] = phi[i];
        P->hs[k] = h[i];
        P->ms[k] = m[i];
    }
    for (int k = 0; k < n; k++) {
        float p = P->ps[k], hk = P->hs[k];
        P->xs[k] = P->ms[k] + p + 0.5f;
        P->hp2[k] = 2.0f * hk * p;
        P->w1[k] = 2.0f * p + 1.0f;
        H += hk;
        S1 += P->hp2[k];
        S2 += hk * ((p + 0.5f) * (p + 0.5f));
    }
    P->H = H;
    P->invH = 1.0f / H;
    P->M1P = 0.5f * (S1 + H);
    P->M2P = S2;
}

/* Best piece given a level's base sums and its active weights ha/hpa (in phase order): (loss, z - L). */
static float scan(const Phases *P, float M1_0, float M2_0, const float *ha, const float *hpa, float *t_out) {
    int n = P->n;
    float t1 = 0.0f, t2 = 0.0f;
    for (int k = 0; k < n; k++) {
        t1 += ha[k];
        t2 += hpa[k];
    }
    float c1 = M1_0 - t1, c2 = M2_0 - t2, invH = P->invH;
    float cs1 = 0.0f, cs2 = 0.0f, v = INFINITY, t = 0.0f;
    for (int k = 0; k < n; k++) {
        cs1 += ha[k];
        cs2 += hpa[k];
        float M1 = cs1 + c1, M2 = cs2 + c2;
        float V = M2 - M1 * M1 * invH;
        if (V < v) {
            v = V;
            t = M1 * invH;
        }
    }
    float v0 = c2 - c1 * c1 * invH;
    if (v0 < v) {
        *t_out = c1 * invH;
        return v0;
    }
    *t_out = t;
    return v;
}

static float level(Phases *P, float L, float *z_out) {
    int n = P->n;
    float q = P->q, shr = 0.0f, shr2 = 0.0f;
    for (int k = 0; k < n; k++) {
        float u = P->ms[k] - L;
        float r = u - clampf(u, 0.0f, q);
        int act = u >= 0.0f && u < q;
        float hr = P->hs[k] * r;
        shr += hr;
        shr2 += hr * (P->w1[k] + r);
        P->ha[k] = act ? P->hs[k] : 0.0f;
        P->hpa[k] = act ? P->hp2[k] : 0.0f;
    }
    float t, v = scan(P, P->M1P + shr, P->M2P + shr2, P->ha, P->hpa, &t);
    *z_out = L + t;
    return v;
}

typedef struct { float F, dF, G, dG; } Bounds;

static Bounds bounds(const Phases *P, float z, float pmin) {
    Bounds b = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < P->n; k++) {
        float above = z - P->xs[k], below = P->xs[k] - P->q - z;
        above = above > 0.0f ? above : 0.0f;
        below = below > 0.0f ? below : 0.0f;
        float d = above + below, d2 = d * d, slope = (above - below) * P->hs[k], g = d2 - 0.25f;
        b.F += P->hs[k] * d2;
        b.G += P->hs[k] * (g > 0.0f ? g : 0.0f);
        b.dF += slope;
        b.dG += d > 0.5f ? slope : 0.0f;
    }
    b.G += pmin;
    return b;
}

/* Lloyd's fixed point from the centred grid (xmin, xmax: the extremes of P->xs). */
static float centre(const Phases *P, float xmin, float xmax) {
    float z = 0.5f * (xmin + xmax - P->q);
    for (int it = 0; it < 2; it++) {
        float s = 0.0f;
        for (int k = 0; k < P->n; k++)
            s += P->hs[k] * (P->xs[k] - clampf(__builtin_roundevenf(P->xs[k] - z), 0.0f, P->q));
        z = s * P->invH;
    }
    return z;
}

static void keep(float v, float z, float *best, float *bz) {
    if (v < *best) {
        *best = v;
        *bz = z;
    }
}

/* Exact min over z of sum h (clamp(round(x - z), 0, q) + z - x)^2; returns the loss, z in *z_out. */
static float exact(Phases *P, const float *x, const float *h, float *z_out) {
    phases_init(P, x, h);
    int n = P->n;
    float q = P->q, xmin = INFINITY, xmax = -INFINITY;
    for (int k = 0; k < n; k++) {
        xmin = P->xs[k] < xmin ? P->xs[k] : xmin;
        xmax = P->xs[k] > xmax ? P->xs[k] : xmax;
    }
    float full_lo = floorf(xmin - q - 0.5f), full_hi = floorf(xmax + 0.5f) + 1.0f;
    float lo = floorf(centre(P, xmin, xmax) - 0.5f);
    lo = lo < full_lo ? full_lo : lo;
    float hi = lo + 2.0f, best, bz, v, z, t;
    best = level(P, lo, &bz);
    v = level(P, lo + 1.0f, &z);
    keep(v, z, &best, &bz);
    for (int k = 0; k < n; k++) {
        P->ha[k] = P->hs[k];
        P->hpa[k] = P->hp2[k];
    }
    float pmin = scan(P, P->M1P, P->M2P, P->ha, P->hpa, &t);
    pmin = pmin > 0.0f ? pmin : 0.0f;
    int certified = 0;
    for (int step = 1; step <= 2; step++) {
        float tol = 1e-6f * (best + P->H);
        Bounds bl = bounds(P, lo, pmin), bh = bounds(P, hi, pmin);
        int done = best <= 1e-7f * P->H;
        int ok_l = done || lo <= full_lo || (bl.F >= best + tol && bl.dF <= 0.0f)
                   || (bl.G >= best + tol && bl.dG <= 0.0f);
        int ok_h = done || hi >= full_hi || (bh.F >= best + tol && bh.dF >= 0.0f)
                   || (bh.G >= best + tol && bh.dG >= 0.0f);
        if (ok_l && ok_h) {
            certified = 1;
            break;
        }
        if (step == 2) break;
        if (!ok_l) {
            v = level(P, lo - 1.0f, &z);
            keep(v, z, &best, &bz);
            lo -= 1.0f;
        }
        if (!ok_h) {
            v = level(P, hi, &z);
            keep(v, z, &best, &bz);
            hi += 1.0f;
        }
    }
    if (!certified)                    /* every level of the full range not swept yet (beyond it f is monotone) */
        for (float L = full_lo; L < full_hi; L += 1.0f) {
            if (L >= lo && L < hi) continue;
            v = level(P, L, &z);
            keep(v, z, &best, &bz);
        }
    *z_out = bz;
    return best > 0.0f ? best : 0.0f;
}

/* ---- the search (neuqi._Search.run, non-exhaustive) ---- */

typedef struct {
    int n, npad, q, T, ncoarse, refine, exact_top, iters, starts;
    const int *coarse;
} Config;

/* Lloyd score at step i: x = w / s into xbuf; (loss, offset) in weight units. */
static float score(const Config *c, const float *w, const float *h, float smm, float wmin, float wmax, float invH,
                   int i, int starts, const float *warm, float *xbuf, float *off) {
    float s = fp16_scale(smm, i, c->T), q = (float)c->q, z;
    for (int k = 0; k < c->npad; k++) xbuf[k] = w[k] / s;
    float loss;
    if (warm) {
        loss = lloyd(xbuf, h, c->npad, q, *warm / s, c->iters, invH, &z);
    } else {
        float z0 = 0.5f * (wmin / s + wmax / s - q), zj;
        loss = INFINITY;
        z = z0;
        for (int j = 0; j < starts; j++) {
            float shift = starts > 1 ? (float)((j + 0.5) / starts - 0.5) : 0.0f;
            float l = lloyd(xbuf, h, c->npad, q, z0 + shift, c->iters, invH, &zj);
            if (j == 0 || l < loss) {
                loss = l;
                z = zj;
            }
        }
    }
    *off = z * s;
    return loss * s * s;
}

static float exact_at(const Config *c, Phases *P, const float *w, const float *h, float smm, int i, float *xbuf,
                      float *off) {
    float s = fp16_scale(smm, i, c->T), z;
    for (int k = 0; k < c->n; k++) xbuf[k] = w[k] / s;
    float loss = exact(P, xbuf, h, &z);
    *off = z * s;
    return loss * s * s;
}

static void search_group(const Config *c, Phases *P, const float *w, const float *h, float smm, float *xbuf,
                         float *closs, float *coff, float *scale_out, float *zero_out) {
    float wmin = INFINITY, wmax = -INFINITY;
    vf hsum = {0};
    for (int k = 0; k < c->n; k++) {
        wmin = w[k] < wmin ? w[k] : wmin;
        wmax = w[k] > wmax ? w[k] : wmax;
    }
    for (int b = 0; b < c->npad; b += LANES) hsum += load(h + b);
    float invH = 1.0f / lane_sum(hsum);
    float best = INFINITY, boff = 0.0f, off;
    int bi = c->T;
    int pick = 0;
    for (int j = 0; j < c->ncoarse; j++) {
        closs[j] = score(c, w, h, smm, wmin, wmax, invH, c->coarse[j], c->starts, NULL, xbuf, &coff[j]);
        if (closs[j] < closs[pick]) pick = j;
    }
    int at;
    float cur, cur_off;
    if (c->exact_top == 0) {
        at = c->coarse[pick];
        cur = closs[pick];
        cur_off = coff[pick];
    } else {
        int k = c->exact_top < c->ncoarse ? c->exact_top : c->ncoarse;
        for (int r = 0; r < k; r++) {    /* the k lowest Lloyd scores, lowest first (ties: lower index) */
            int m = -1;
            for (int j = 0; j < c->ncoarse; j++)
                if (!isnan(closs[j]) && (m < 0 || closs[j] < closs[m])) m = j;
            float v = exact_at(c, P, w, h, smm, c->coarse[m], xbuf, &off);
            if (v < best) {
                best = v;
                bi = c->coarse[m];
                boff = off;
            }
            closs[m] = NAN;
        }
        at = bi;
        cur = best;
        cur_off = boff;
    }
    for (int step = c->refine; step >= 1; step /= 2) {
        int ca = at - step < 1 ? 1 : at - step, cb = at + step > c->T ? c->T : at + step;
        float oa, ob;
        float la = score(c, w, h, smm, wmin, wmax, invH, ca, 1, &cur_off, xbuf, &oa);
        float lb = score(c, w, h, smm, wmin, wmax, invH, cb, 1, &cur_off, xbuf, &ob);
        int use_b = lb < la;
        float v = use_b ? lb : la;
        if (v < cur) {
            at = use_b ? cb : ca;
            cur_off = use_b ? ob : oa;
            cur = v;
        }
    }
    float v = exact_at(c, P, w, h, smm, at, xbuf, &off);
    if (v < best) {
        bi = at;
        boff = off;
    }
    float s = fp16_scale(smm, bi, c->T);
    *scale_out = s;
    *zero_out = boff / s;
}

static Phases *phases_alloc(int n, int q) {
    Phases *P = calloc(1, sizeof(Phases));
    float *buf = malloc(sizeof(float) * 9 * (size_t)n);
    int *idx = malloc(sizeof(int) * (size_t)n);
    uint64_t *keys = n > 256 ? malloc(sizeof(uint64_t) * (size_t)n) : NULL;
    if (!P || !buf || !idx || (n > 256 && !keys)) {
        free(P);
        free(buf);
        free(idx);
        free(keys);
        return NULL;
    }
    P->idx = idx;
    P->keys = keys;
    P->n = n;
    P->q = (float)q;
    float **arrays[] = {&P->ps, &P->hs, &P->ms, &P->xs, &P->hp2, &P->w1, &P->ha, &P->hpa, &P->key};
    for (int a = 0; a < 9; a++) *arrays[a] = buf + (size_t)a * n;
    return P;
}

static void phases_free(Phases *P) {
    if (!P) return;
    free(P->ps);
    free(P->idx);
    free(P->keys);
    free(P);
}

/* Groups [0, G) of w/h ([G, npad] float32, padded with h = 0 beyond n), smm [G]; writes scale, zero [G].
 * Returns 0, or -1 when out of memory. */
int neuqi_search(const float *w, const float *h, const float *smm, long G, int n, int npad, int q, int T,
                 const int *coarse, int ncoarse, int refine, int exact_top, int iters, int starts, float *scale,
                 float *zero) {
    Config c = {n, npad, q, T, ncoarse, refine, exact_top, iters, starts, coarse};
    Phases *P = phases_alloc(n, q);
    float *xbuf = malloc(sizeof(float) * (size_t)npad), *closs = malloc(sizeof(float) * (size_t)ncoarse),
          *coff = malloc(sizeof(float) * (size_t)ncoarse);
    int rc = 0;
    if (!P || !xbuf || !closs || !coff) {
        rc = -1;
    } else {
        for (long g = 0; g < G; g++)
            search_group(&c, P, w + g * npad, h + g * npad, smm[g], xbuf, closs, coff, scale + g, zero + g);
    }
    phases_free(P);
    free(xbuf);
    free(closs);
    free(coff);
    return rc;
}

/* exact_zero for rows of x/h ([G, n]): loss and z per row (the tests compare it with brute force). */
int neuqi_exact(const float *x, const float *h, long G, int n, int q, float *loss, float *z) {
    Phases *P = phases_alloc(n, q);
    if (!P) return -1;
    for (long g = 0; g < G; g++) loss[g] = exact(P, x + g * n, h + g * n, z + g);
    phases_free(P);
    return 0;
}
