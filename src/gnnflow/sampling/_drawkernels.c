/*
 * Floyd's choice of k of d positions per row, from counter-based uniforms: the C form of
 * gnnflow.sampling.draws.floyd_choose (that module documents the draws), equal to the numpy
 * form draw for draw; and a whole hop's edge positions (gf_sample_positions: the C form of
 * gnnflow.sampling.neighbor.sample_edge_positions).
 *
 * Plain C called through ctypes; built as a Python extension module only so that pip
 * compiles and installs it with the package.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL

static inline uint64_t mix64(uint64_t z) { /* SplitMix64's finaliser */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* c[0 .. k): Floyd's sorted choice of k distinct positions in [0, d) (d >= k) from a row's hash */
static inline void floyd_row(int64_t k, int64_t d, uint64_t h, int64_t *c) {
    const double to_unit = 1.0 / 9007199254740992.0; /* 2^-53 */
    const int64_t base = d - k;
    for (int64_t i = 0; i < k; i++) {
        const int64_t j = base + i;
        const double u = (double)(mix64(h + (uint64_t)(i + 1) * GOLDEN) >> 11) * to_unit;
        int64_t t = (int64_t)(u * (double)(j + 1));
        if (t > j) t = j;
        for (int64_t m = 0; m < i; m++)
            if (c[m] == t) { t = j; break; }
        c[i] = t;
    }
    for (int64_t i = 1; i < k; i++) { /* insertion sort: k is a fanout */
        const int64_t v = c[i];
        int64_t m = i - 1;
        while (m >= 0 && c[m] > v) { c[m + 1] = c[m]; m--; }
        c[m + 1] = v;
    }
}

/* chosen[r * k .. r * k + k): sorted distinct positions in [0, deg[r]) (deg[r] >= k) */
void gf_floyd_choose(int64_t rows, int64_t k, const int64_t *deg, const uint64_t *row_hash, int64_t *chosen) {
    for (int64_t r = 0; r < rows; r++)
        floyd_row(k, deg[r], row_hash[r], chosen + r * k);
}

/* One hop of uniform sampling without replacement (k >= 0), written as edge positions: row r
 * (CSR offset starts[r], deg[r] in-edges, global id vertex_ids[r]) takes all of its edges when
 * deg[r] <= k, else Floyd's choice of k from its hash mix(mix(id + GOLDEN) ^ layer_key) (the
 * numpy form's DrawKey.row_hashes), sorted; rows follow each other in eid (sum of min(deg, k)). */
void gf_sample_positions(int64_t rows, int64_t k, const int64_t *starts, const int64_t *deg,
                         const int64_t *vertex_ids, uint64_t layer_key, int64_t *eid) {
    int64_t at = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t s = starts[r], d = deg[r];
        if (d <= k) {
            for (int64_t i = 0; i < d; i++) eid[at + i] = s + i;
            at += d;
            continue;
        }
        const uint64_t h = mix64(mix64((uint64_t)vertex_ids[r] + GOLDEN) ^ layer_key);
        floyd_row(k, d, h, eid + at);
        for (int64_t i = 0; i < k; i++) eid[at + i] += s;
        at += k;
    }
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_drawkernels",
                                    "C kernel of gnnflow.sampling.draws (called through ctypes)", -1, NULL};

PyMODINIT_FUNC PyInit__drawkernels(void) { return PyModule_Create(&module); }
