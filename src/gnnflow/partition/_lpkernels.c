/*
 * Label-propagation kernels of gnnflow's memory-bounded METIS path
 * (gnnflow/partition/coarsen.py documents the algorithm).
 *
 * Plain C called through ctypes; built as a Python extension module only so
 * that pip compiles and installs it with the package.  Sequential and
 * deterministic from the seed.  Graphs: int64 indptr, int32 neighbour ids,
 * optional int32 edge weights (NULL = 1), int64 vertex weights [n x ncon].
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { uint64_t s; } rng_t;

static uint64_t rng_next(rng_t *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int64_t *random_order(int64_t n, rng_t *r) {
    int64_t *order = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!order) return NULL;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)(rng_next(r) % (uint64_t)(i + 1));
        int64_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    return order;
}

static int fits(const int64_t *load, int64_t c, const int64_t *vw, int64_t u, const int64_t *cap, int64_t ncon) {
    for (int64_t k = 0; k < ncon; k++)
        if (load[c * ncon + k] + vw[u * ncon + k] > cap[k]) return 0;
    return 1;
}

static void shift(int64_t *load, int64_t src, int64_t dst, const int64_t *vw, int64_t u, int64_t ncon) {
    for (int64_t k = 0; k < ncon; k++) {
        load[src * ncon + k] -= vw[u * ncon + k];
        load[dst * ncon + k] += vw[u * ncon + k];
    }
}

/* Weighted connection of u to every label; touched labels in touched[0..return). */
static int64_t rate(int64_t u, const int64_t *indptr, const int32_t *indices, const int32_t *ew,
                    const int64_t *labels, int64_t skip, int64_t *rating, int64_t *touched) {
    int64_t nt = 0;
    for (int64_t j = indptr[u]; j < indptr[u + 1]; j++) {
        int64_t c = labels[indices[j]];
        if (c == skip) continue;
        if (rating[c] == 0) touched[nt++] = c;
        rating[c] += ew ? ew[j] : 1;
    }
    return nt;
}

/*
 * Size-constrained label propagation, then two-hop grouping of the singletons.
 * labels (out, n): compact cluster ids 0..C-1.  Returns C, or -1 if out of memory.
 */
int64_t gf_cluster(int64_t n, const int64_t *indptr, const int32_t *indices, const int32_t *ew,
                   int64_t ncon, const int64_t *vw, const int64_t *cap, int64_t rounds, uint64_t seed,
                   int64_t *labels) {
    rng_t r = {seed};
    int64_t *load = malloc((size_t)(n * ncon + 1) * sizeof(int64_t));
    int64_t *rating = calloc((size_t)n + 1, sizeof(int64_t));
    int64_t *touched = malloc(((size_t)n + 1) * sizeof(int64_t));
    int64_t *order = random_order(n, &r);
    if (!load || !rating || !touched || !order) {
        free(load); free(rating); free(touched); free(order);
        return -1;
    }
    memcpy(load, vw, (size_t)(n * ncon) * sizeof(int64_t));
    for (int64_t u = 0; u < n; u++) labels[u] = u;
    int64_t min_moves = n / 100 > 1 ? n / 100 : 1;
    for (int64_t round = 0; round < rounds; round++) {
        int64_t moves = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t u = order[i], cu = labels[u];
            int64_t nt = rate(u, indptr, indices, ew, labels, -1, rating, touched);
            int64_t best = cu, best_r = rating[cu], ties = 1;
            for (int64_t t = 0; t < nt; t++) {
                int64_t c = touched[t], rc = rating[c];
                if (c == cu || rc < best_r || !fits(load, c, vw, u, cap, ncon)) continue;
                if (rc > best_r) { best = c; best_r = rc; ties = 1; }
                else if (rng_next(&r) % (uint64_t)(++ties) == 0) best = c; /* uniform among ties */
            }
            for (int64_t t = 0; t < nt; t++) rating[touched[t]] = 0;
            if (best != cu) { shift(load, cu, best, vw, u, ncon); labels[u] = best; moves++; }
        }
        if (moves < min_moves) break;
    }
    /* two-hop: a singleton whose neighbouring clusters are full joins the group of
       singletons that favour the same cluster (they share that neighbourhood) */
    int64_t *size = rating; /* reuse: rating is all zero here */
    int64_t *leader = touched;
    for (int64_t u = 0; u < n; u++) size[labels[u]]++;
    int64_t *single = malloc(((size_t)n + 1) * sizeof(int64_t));
    if (!single) { free(load); free(rating); free(touched); free(order); return -1; }
    for (int64_t u = 0; u < n; u++) single[u] = size[labels[u]] == 1;
    memset(size, 0, (size_t)n * sizeof(int64_t));
    int64_t *fav_rating = size; /* zero again: reused as the rating array */
    int64_t *fav_touched = malloc(((size_t)n + 1) * sizeof(int64_t));
    if (!fav_touched) { free(load); free(rating); free(touched); free(order); free(single); return -1; }
    for (int64_t u = 0; u < n; u++) leader[u] = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t u = order[i], cu = labels[u];
        if (!single[u]) continue;
        int64_t nt = rate(u, indptr, indices, ew, labels, cu, fav_rating, fav_touched);
        int64_t fav = -1, fav_r = 0;
        for (int64_t t = 0; t < nt; t++) {
            int64_t c = fav_touched[t];
            if (fav_rating[c] > fav_r) { fav = c; fav_r = fav_rating[c]; }
            fav_rating[c] = 0;
        }
        if (fav < 0) continue;
        int64_t g = leader[fav];
        if (g >= 0 && g != cu && fits(load, g, vw, u, cap, ncon)) {
            shift(load, cu, g, vw, u, ncon);
            labels[u] = g;
        } else {
            leader[fav] = cu;
        }
    }
    /* compact the labels to 0..C-1 in order of first appearance */
    int64_t *newid = leader;
    for (int64_t u = 0; u < n; u++) newid[u] = -1;
    int64_t c = 0;
    for (int64_t u = 0; u < n; u++) {
        int64_t lab = labels[u];
        if (newid[lab] < 0) newid[lab] = c++;
        labels[u] = newid[lab];
    }
    free(load); free(rating); free(touched); free(order); free(single); free(fav_touched);
    return c;
}

/*
 * Contract clusters: with cindices == NULL only counts the coarse entries (the
 * return value); otherwise fills cindptr (C+1), cindices and cweights.  No self-loops.
 * Returns -1 if out of memory.
 */
int64_t gf_contract(int64_t n, const int64_t *indptr, const int32_t *indices, const int32_t *ew,
                    const int64_t *cluster, int64_t nc, int64_t *cindptr, int32_t *cindices,
                    int32_t *cweights) {
    int64_t *start = calloc((size_t)nc + 2, sizeof(int64_t));
    int64_t *members = malloc(((size_t)n + 1) * sizeof(int64_t));
    int64_t *rating = calloc((size_t)nc + 1, sizeof(int64_t));
    int64_t *touched = malloc(((size_t)nc + 1) * sizeof(int64_t));
    if (!start || !members || !rating || !touched) {
        free(start); free(members); free(rating); free(touched);
        return -1;
    }
    for (int64_t u = 0; u < n; u++) start[cluster[u] + 2]++;
    for (int64_t c = 0; c < nc; c++) start[c + 2] += start[c + 1];
    for (int64_t u = 0; u < n; u++) members[start[cluster[u] + 1]++] = u; /* start[c] .. start[c+1] */
    int64_t out = 0;
    if (cindices) cindptr[0] = 0;
    for (int64_t c = 0; c < nc; c++) {
        int64_t nt = 0;
        for (int64_t m = start[c]; m < start[c + 1]; m++) {
            int64_t u = members[m];
            for (int64_t j = indptr[u]; j < indptr[u + 1]; j++) {
                int64_t d = cluster[indices[j]];
                if (d == c) continue;
                if (rating[d] == 0) touched[nt++] = d;
                rating[d] += ew ? ew[j] : 1;
            }
        }
        for (int64_t t = 0; t < nt; t++) {
            int64_t d = touched[t];
            if (cindices) { cindices[out] = (int32_t)d; cweights[out] = (int32_t)rating[d]; }
            out++;
            rating[d] = 0;
        }
        if (cindices) cindptr[c + 1] = out;
    }
    free(start); free(members); free(rating); free(touched);
    return out;
}

/*
 * Greedy k-way refinement: in random order, a vertex moves to the part it has the
 * most edge weight to if that beats its own part and the target stays <= cap in
 * every constraint.  part (int64, in/out); load (nparts x ncon, in/out): the parts'
 * constraint sums.  Returns the moves, or -1 if out of memory.
 */
int64_t gf_refine(int64_t n, const int64_t *indptr, const int32_t *indices, const int32_t *ew,
                  int64_t ncon, const int64_t *vw, int64_t *part, int64_t nparts, int64_t *load,
                  const int64_t *cap, int64_t rounds, uint64_t seed) {
    rng_t r = {seed};
    int64_t *conn = calloc((size_t)nparts, sizeof(int64_t));
    int64_t *touched = malloc((size_t)nparts * sizeof(int64_t));
    if (!conn || !touched) { free(conn); free(touched); return -1; }
    int64_t total = 0, min_moves = n / 1000 > 1 ? n / 1000 : 1;
    for (int64_t round = 0; round < rounds; round++) {
        int64_t *order = random_order(n, &r);
        if (!order) { free(conn); free(touched); return -1; }
        int64_t moves = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t u = order[i], pu = part[u];
            int64_t nt = rate(u, indptr, indices, ew, part, -1, conn, touched);
            int64_t best = pu, best_c = conn[pu];
            for (int64_t t = 0; t < nt; t++) {
                int64_t q = touched[t];
                if (q != pu && conn[q] > best_c && fits(load, q, vw, u, cap, ncon)) { best = q; best_c = conn[q]; }
            }
            for (int64_t t = 0; t < nt; t++) conn[touched[t]] = 0;
            if (best != pu) { shift(load, pu, best, vw, u, ncon); part[u] = best; moves++; }
        }
        free(order);
        total += moves;
        if (moves < min_moves) break;
    }
    free(conn); free(touched);
    return total;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lpkernels",
                                    "C kernels for gnnflow.partition.coarsen (called through ctypes)", -1, NULL};

PyMODINIT_FUNC PyInit__lpkernels(void) { return PyModule_Create(&module); }
