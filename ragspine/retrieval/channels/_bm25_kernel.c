/* The BM25 query kernel of InvertedIndex, compiled: sum a query's cached per-term contributions and select
 * its best documents in one call, instead of a dozen NumPy calls over every slot.
 *
 * It computes exactly what the NumPy path of inverted_index.py computes, bit for bit: per slot, the terms
 * kept sparse are summed in query order starting from 0.0 (np.bincount's order), the terms kept dense
 * are summed in query order starting from 0.0, and the slot's score is the sparse sum plus the dense sum.
 * A term's weight is its cached contribution, multiplied by its count in the query when that is not 1.
 *
 * top(entries, counts, keys, n_slots, k) -> (keys, scores)
 *   entries: the index's cached term entries, tuples (slots, contrib, dense, nbytes, peak): the term's
 *            distinct int32 slots; its float64 contributions aligned with them, or None; its float64
 *            contribution per slot of the index (zero elsewhere), or None; its size; and its largest
 *            contribution. counts: how often each entry's term occurs in the query. keys: the index's
 *            object array of slot keys (str for every live slot).
 *   Returns the keys and scores of the k best positive scores, ordered by (-score, key): every slot at
 *   or above the k-th best score is ranked, so the slots tying at the k-th place are cut by key.
 *
 * How: the sparse terms are scattered into a per-slot sum, remembering the slots they touch. When the
 * query has dense terms, the touched slots are scored first (adding each dense term's value at the slot);
 * if the k-th best of them beats the most any other slot can score (the sum of the dense terms' largest
 * contributions), no untouched slot can enter or tie, and the answer is final. Otherwise the dense terms
 * are added over every slot and every slot is offered.
 *
 * Scratch buffers are module-wide and used with the GIL held (the call never releases it), so
 * concurrent Python threads take turns, as they do with the NumPy path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static double *sparse_acc = NULL;  /* per slot: sum over sparse terms; zero between calls */
static double *dense_acc = NULL;   /* per slot: sum over dense terms (assigned by a query's first one) */
static uint8_t *seen = NULL;       /* per slot: touched by a sparse term; zero between calls */
static int32_t *touched = NULL;    /* the slots sparse terms touched, in first-touch order */
static Py_ssize_t capacity = 0;

static int ensure_capacity(Py_ssize_t n) {
    if (n <= capacity) return 0;
    Py_ssize_t size = capacity ? capacity : 1024;
    while (size < n) size *= 2;
    double *s = calloc((size_t)size, sizeof(double));
    double *d = calloc((size_t)size, sizeof(double));
    uint8_t *m = calloc((size_t)size, 1);
    int32_t *t = malloc((size_t)size * sizeof(int32_t));
    if (!s || !d || !m || !t) {
        free(s);
        free(d);
        free(m);
        free(t);
        PyErr_NoMemory();
        return -1;
    }
    free(sparse_acc);
    free(dense_acc);
    free(seen);
    free(touched);
    sparse_acc = s;
    dense_acc = d;
    seen = m;
    touched = t;
    capacity = size;
    return 0;
}

/* ------------------------------------------------------------------ the query's terms */

typedef struct {
    Py_buffer slots, weights;
    int dense;
    double count, peak;
} Term;

/* The struct type code of a one-item buffer format in native byte order ("d", "@d", "=d"), else 0. */
static char type_code(const char *format) {
    if (!format) return 0;
    if (format[0] == '@' || format[0] == '=') format++;
    return format[0] && !format[1] ? format[0] : 0;
}

/* Borrows an entry's buffers: int32 slots and float64 weights (aligned with the slots, or one per slot of
 * the index for a dense term). Fails with ValueError on anything else. */
static int open_term(PyObject *entry, PyObject *count_obj, Py_ssize_t n_slots, Term *term) {
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 5) {
        PyErr_SetString(PyExc_ValueError,
                        "a term entry must be a (slots, contrib, dense, nbytes, peak) tuple");
        return -1;
    }
    term->count = PyFloat_AsDouble(count_obj);
    if (term->count == -1.0 && PyErr_Occurred()) return -1;
    if (!(term->count >= 1.0)) {
        PyErr_SetString(PyExc_ValueError, "a query term count must be at least 1");
        return -1;
    }
    term->peak = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 4));
    if (term->peak == -1.0 && PyErr_Occurred()) return -1;
    term->dense = PyTuple_GET_ITEM(entry, 2) != Py_None;
    PyObject *weights = PyTuple_GET_ITEM(entry, term->dense ? 2 : 1);
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(entry, 0), &term->slots, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (PyObject_GetBuffer(weights, &term->weights, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&term->slots);
        return -1;
    }
    const Py_buffer *s = &term->slots, *w = &term->weights;
    char slot_code = type_code(s->format);
    int ok = s->itemsize == 4 && (slot_code == 'i' || slot_code == 'l') && w->itemsize == 8
             && type_code(w->format) == 'd';
    if (ok) ok = term->dense ? w->len / 8 >= n_slots : w->len / 8 == s->len / 4;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "a term entry needs int32 slots and float64 weights of matching length");
        PyBuffer_Release(&term->slots);
        PyBuffer_Release(&term->weights);
        return -1;
    }
    return 0;
}

static void close_terms(Term *terms, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyBuffer_Release(&terms[i].slots);
        PyBuffer_Release(&terms[i].weights);
    }
}

static inline double weight(const Term *term, double w) { return term->count == 1.0 ? w : w * term->count; }

/* Scatters a sparse term's weights into sparse_acc, recording the slots it touches first; -1 for a slot
 * outside [0, n_slots). */
static int scatter(const Term *term, Py_ssize_t n_slots, Py_ssize_t *n_touched) {
    const int32_t *s = (const int32_t *)term->slots.buf;
    const double *w = (const double *)term->weights.buf;
    Py_ssize_t n = term->slots.len / 4, t = *n_touched;
    int rc = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t slot = s[i];
        if (slot < 0 || slot >= n_slots) {
            rc = -1; /* the caller raises once the scratch is clean again */
            break;
        }
        if (!seen[slot]) {
            seen[slot] = 1;
            touched[t++] = slot;
        }
        sparse_acc[slot] += weight(term, w[i]);
    }
    *n_touched = t;
    return rc;
}

/* Adds a dense term's per-slot weights to dense_acc (the first dense term of a query assigns them, which
 * equals adding them to 0.0); zeros add nothing. */
static void add_dense(const Term *term, Py_ssize_t n_slots, int first) {
    const double *w = (const double *)term->weights.buf;
    double c = term->count;
    if (first && c == 1.0)
        memcpy(dense_acc, w, (size_t)n_slots * sizeof(double));
    else if (first)
        for (Py_ssize_t i = 0; i < n_slots; i++) dense_acc[i] = w[i] * c;
    else if (c == 1.0)
        for (Py_ssize_t i = 0; i < n_slots; i++) dense_acc[i] += w[i];
    else
        for (Py_ssize_t i = 0; i < n_slots; i++) dense_acc[i] += w[i] * c;
}

/* ------------------------------------------------------------------ selecting the best k */

typedef struct {
    int32_t slot;
    double score;
} Hit;

/* The best k positive scores offered so far (a min-heap: the root is the weakest kept) plus the hits
 * offered since with a score equal to the root's, which tie with the k-th best while the root stays. */
typedef struct {
    Hit *heap;
    Py_ssize_t k, size;
    Hit *ties;
    Py_ssize_t n_ties, ties_cap;
    int failed; /* the tie list could not grow: MemoryError */
} Selection;

static void sift_down(Hit *heap, Py_ssize_t n, Py_ssize_t i) {
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap[l].score < heap[m].score) m = l;
        if (r < n && heap[r].score < heap[m].score) m = r;
        if (m == i) return;
        Hit tmp = heap[i];
        heap[i] = heap[m];
        heap[m] = tmp;
        i = m;
    }
}

static void keep_tie(Selection *sel, Hit hit) {
    if (sel->n_ties == sel->ties_cap) {
        Py_ssize_t cap = sel->ties_cap ? 2 * sel->ties_cap : 16;
        Hit *grown = PyMem_Realloc(sel->ties, (size_t)cap * sizeof(Hit));
        if (!grown) {
            sel->failed = 1;
            return;
        }
        sel->ties = grown;
        sel->ties_cap = cap;
    }
    sel->ties[sel->n_ties++] = hit;
}

/* The score a slot must reach to be offered: any positive one until k are kept, then the weakest kept. */
static inline double bar(const Selection *sel) { return sel->size < sel->k ? 0.0 : sel->heap[0].score; }

/* Offers a positive score of at least bar(sel). */
static void offer(Selection *sel, int32_t slot, double score) {
    Hit *heap = sel->heap;
    Py_ssize_t k = sel->k;
    Hit hit = {slot, score};
    if (sel->size < k) {
        heap[sel->size] = hit;
        if (++sel->size == k)
            for (Py_ssize_t j = k / 2; j-- > 0;) sift_down(heap, k, j);
    } else if (score > heap[0].score) {
        Hit evicted = heap[0];
        heap[0] = hit;
        sift_down(heap, k, 0);
        if (heap[0].score > evicted.score)
            sel->n_ties = 0; /* the ties and the evicted hit now fall below the k-th best */
        else
            keep_tie(sel, evicted); /* another kept hit has its score: it still ties */
    } else {
        keep_tie(sel, hit); /* equal to the weakest kept */
    }
}

static inline void consider(Selection *sel, int32_t slot, double score) {
    if (score > 0.0 && score >= bar(sel)) offer(sel, slot, score);
}

#define BLOCK 16

/* Offers every slot of total[0..n). A block with nothing at or above the bar is passed over after one
 * pass of comparisons. */
static void select_all(const double *total, Py_ssize_t n, Selection *sel) {
    Py_ssize_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        double b = bar(sel);
        const double *t = total + i;
        int a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (int j = 0; j < BLOCK; j += 4) {
            a0 |= t[j] >= b;
            a1 |= t[j + 1] >= b;
            a2 |= t[j + 2] >= b;
            a3 |= t[j + 3] >= b;
        }
        if (a0 | a1 | a2 | a3)
            for (int j = 0; j < BLOCK; j++) consider(sel, (int32_t)(i + j), t[j]);
    }
    for (; i < n; i++) consider(sel, (int32_t)i, total[i]);
}

/* Scores the touched slots: sparse sum plus the dense terms' values at the slot, summed in query order
 * (the first dense term assigning), exactly as the full dense pass would give them. A slot whose sparse
 * sum plus `reach` (what the dense terms can add at most) falls below the bar is passed over: rounding
 * is monotonic, so its score could not reach the bar either. */
static void select_touched(const Term *terms, Py_ssize_t n_terms, Py_ssize_t n_touched, double reach,
                           Selection *sel) {
    const double *w[64];
    double c[64];
    Py_ssize_t n_dense = 0;
    for (Py_ssize_t j = 0; j < n_terms && n_dense < 64; j++)
        if (terms[j].dense) {
            w[n_dense] = (const double *)terms[j].weights.buf;
            c[n_dense++] = terms[j].count;
        }
    if (n_dense == 64) { /* a query this long: read the terms as they come */
        for (Py_ssize_t i = 0; i < n_touched; i++) {
            int32_t slot = touched[i];
            double dense = 0.0;
            int first = 1;
            for (Py_ssize_t j = 0; j < n_terms; j++)
                if (terms[j].dense) {
                    double x = weight(&terms[j], ((const double *)terms[j].weights.buf)[slot]);
                    dense = first ? x : dense + x;
                    first = 0;
                }
            consider(sel, slot, first ? sparse_acc[slot] : sparse_acc[slot] + dense);
        }
        return;
    }
    for (Py_ssize_t i = 0; i < n_touched; i++) {
        int32_t slot = touched[i];
        double sparse = sparse_acc[slot];
        if (!n_dense) {
            consider(sel, slot, sparse);
            continue;
        }
        if (sparse + reach < bar(sel)) continue;
        double dense = c[0] == 1.0 ? w[0][slot] : w[0][slot] * c[0];
        for (Py_ssize_t j = 1; j < n_dense; j++) dense += c[j] == 1.0 ? w[j][slot] : w[j][slot] * c[j];
        consider(sel, slot, sparse + dense);
    }
}

static void reset_touched(Py_ssize_t n_touched) {
    for (Py_ssize_t i = 0; i < n_touched; i++) {
        int32_t slot = touched[i];
        seen[slot] = 0;
        sparse_acc[slot] = 0.0;
    }
}

/* A result with its key: ordered by score, best first, then by key (str order, as Python's). */
typedef struct {
    double score;
    PyObject *key;
} Ranked;

static int by_rank(const void *a, const void *b) {
    const Ranked *x = (const Ranked *)a, *y = (const Ranked *)b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return PyUnicode_Compare(x->key, y->key); /* both str: cannot fail */
}

/* The best k of the selection as ([key, ...], [score, ...]), ordered by (-score, key). */
static PyObject *answer(const Selection *sel, const Py_buffer *keys, Py_ssize_t k) {
    Py_ssize_t n = sel->size + sel->n_ties;
    Ranked *ranked = PyMem_Malloc((size_t)(n + 1) * sizeof(Ranked));
    if (!ranked) return PyErr_NoMemory();
    PyObject *const *key_of = (PyObject *const *)keys->buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Hit *hit = i < sel->size ? &sel->heap[i] : &sel->ties[i - sel->size];
        PyObject *key = key_of[hit->slot];
        if (key == NULL || !PyUnicode_Check(key)) {
            PyMem_Free(ranked);
            PyErr_Format(PyExc_ValueError, "slot %d has no key: the term entries are stale", (int)hit->slot);
            return NULL;
        }
        ranked[i].score = hit->score;
        ranked[i].key = key;
    }
    qsort(ranked, (size_t)n, sizeof(Ranked), by_rank);
    if (n > k) n = k;
    PyObject *found = PyList_New(n), *scores = PyList_New(n), *result = NULL;
    if (found && scores) {
        Py_ssize_t i = 0;
        for (; i < n; i++) {
            PyObject *score = PyFloat_FromDouble(ranked[i].score);
            if (!score) break;
            Py_INCREF(ranked[i].key);
            PyList_SET_ITEM(found, i, ranked[i].key);
            PyList_SET_ITEM(scores, i, score);
        }
        if (i == n) result = PyTuple_Pack(2, found, scores);
    }
    Py_XDECREF(found);
    Py_XDECREF(scores);
    PyMem_Free(ranked);
    return result;
}

static PyObject *kernel_top(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *entries, *counts, *keys_obj;
    Py_ssize_t n_slots, k;
    if (!PyArg_ParseTuple(args, "O!O!Onn:top", &PyList_Type, &entries, &PyList_Type, &counts, &keys_obj,
                          &n_slots, &k))
        return NULL;
    Py_ssize_t n_terms = PyList_GET_SIZE(entries);
    if (PyList_GET_SIZE(counts) != n_terms) {
        PyErr_SetString(PyExc_ValueError, "entries and counts differ in length");
        return NULL;
    }
    if (n_slots < 0 || n_slots > INT32_MAX || k < 1) {
        PyErr_SetString(PyExc_ValueError, "n_slots must be in [0, 2**31) and k >= 1");
        return NULL;
    }
    if (k > n_slots) k = n_slots > 0 ? n_slots : 1; /* no more than every slot can be kept */
    Py_buffer keys;
    if (PyObject_GetBuffer(keys_obj, &keys, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (keys.itemsize != sizeof(PyObject *) || !keys.format || keys.format[0] != 'O'
        || keys.len / keys.itemsize < n_slots) {
        PyBuffer_Release(&keys);
        PyErr_SetString(PyExc_ValueError, "keys must be an object array with a key for each of n_slots slots");
        return NULL;
    }
    Term *terms = PyMem_Malloc((size_t)(n_terms + 1) * sizeof(Term));
    Selection sel = {PyMem_Malloc((size_t)k * sizeof(Hit)), k, 0, NULL, 0, 0, 0};
    if (!terms || !sel.heap) {
        PyMem_Free(terms);
        PyMem_Free(sel.heap);
        PyBuffer_Release(&keys);
        return PyErr_NoMemory();
    }
    /* Everything that may run Python code (number conversions, buffer requests) happens first: from the
     * scratch's first use to its reset below no Python API is called, so no other thread can run the
     * kernel in between. */
    Py_ssize_t opened = 0;
    int failed = 0;
    for (; opened < n_terms; opened++)
        if (open_term(PyList_GET_ITEM(entries, opened), PyList_GET_ITEM(counts, opened), n_slots,
                      &terms[opened]) < 0) {
            failed = 1;
            break;
        }
    if (!failed && ensure_capacity(n_slots) < 0) failed = 1;
    Py_ssize_t n_touched = 0;
    int bad_slot = 0, any_dense = 0;
    double reach = 0.0; /* the most a slot no sparse term touched can score: the dense terms' peaks */
    for (Py_ssize_t j = 0; j < n_terms && !failed && !bad_slot; j++) {
        const Term *term = &terms[j];
        if (term->dense) {
            double peak = weight(term, term->peak);
            reach = any_dense ? reach + peak : peak;
            any_dense = 1;
        } else if (scatter(term, n_slots, &n_touched) < 0) {
            bad_slot = 1;
        }
    }
    if (!failed && !bad_slot) {
        select_touched(terms, n_terms, n_touched, reach, &sel);
        if (any_dense && !(sel.size == k && sel.heap[0].score > reach)) {
            /* An untouched slot may enter or tie: every slot is offered with its full score. */
            sel.size = sel.n_ties = 0;
            int first = 1;
            for (Py_ssize_t j = 0; j < n_terms; j++)
                if (terms[j].dense) {
                    add_dense(&terms[j], n_slots, first);
                    first = 0;
                }
            for (Py_ssize_t i = 0; i < n_touched; i++) dense_acc[touched[i]] += sparse_acc[touched[i]];
            select_all(dense_acc, n_slots, &sel);
        }
    }
    reset_touched(n_touched);
    close_terms(terms, opened);
    PyMem_Free(terms);
    if (bad_slot) {
        PyErr_SetString(PyExc_ValueError, "a term entry names a slot outside the index");
        failed = 1;
    } else if (!failed && sel.failed) {
        PyErr_NoMemory();
        failed = 1;
    }
    PyObject *result = failed ? NULL : answer(&sel, &keys, k);
    PyBuffer_Release(&keys);
    PyMem_Free(sel.heap);
    PyMem_Free(sel.ties);
    return result;
}

static PyMethodDef methods[] = {
    {"top", kernel_top, METH_VARARGS,
     "top(entries, counts, keys, n_slots, k) -> (keys, scores): the k best positive BM25 scores and "
     "their keys, ordered by (-score, key) (see the module source for the exact contract)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bm25_kernel",
    "Compiled BM25 query kernel of ragspine.retrieval.lexical.inverted_index.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bm25_kernel(void) { return PyModule_Create(&module); }
