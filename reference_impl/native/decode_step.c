/* One-token llama decode step in C: the native fast path of the reference decoder.
 *
 * It computes exactly what reference_impl/model/llama.py computes for a ubatch of one token
 * (same fused, norm-folded float32 weights, same K/V cache tensors), without a Python or torch
 * dispatch per op. Why it exists: at decode sizes each layer streams ~12 MB of weights, which
 * evicts the L2 and makes every small torch op after a matmul run from cold caches; here the
 * whole step is a few kilobytes of code. The torch forward stays the definition: the suite
 * checks this step against it (spec DEC-NATIVE-*), including with deliberately broken builds
 * (the DC_MUTANT_* defines, used only by the meta-tests).
 *
 * Matrix-vector products are split across a small thread pool (row ranges); the
 * workers spin between the products of one step and sleep between steps.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#define DC_MAX_THREADS 64
#define DC_ABI_VERSION 1

typedef struct {
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    float eps, kq_scale;
    const float *token_embd;   /* [n_vocab, n_embd] */
    const float *const *wqkv;  /* per layer [n_q + 2 n_kv, n_embd], attn_norm folded in */
    const float *const *wo;    /* per layer [n_embd, n_q] */
    const float *const *wgu;   /* per layer [2 n_ff, n_embd] (gate rows, then up), ffn_norm folded */
    const float *const *wdown; /* per layer [n_embd, n_ff] */
    const float *output_norm;  /* [n_embd] */
    const float *output;       /* [n_vocab, n_embd] */
} dc_model;

typedef struct {
    int token;                /* token id, or -1 to read x_in */
    const float *x_in;        /* [n_embd] input embedding when token < 0 */
    const float *rope;        /* [head_dim / 2][2]: cos, sin of this position */
    float *const *k_cache;    /* per layer: cell 0 of the stream, [kv_size, n_head_kv, hd] */
    float *const *v_cache;
    int cell;                 /* cell receiving this token's K/V */
    int n_kv;                 /* cells attended (mask columns) */
    const float *mask;        /* [n_kv] additive: 0 or -inf */
    float *hidden;            /* out: [n_embd] final normalized hidden state */
    float *logits;            /* out: [n_vocab], or NULL */
    float *scratch;           /* dc_scratch_floats() floats */
} dc_step;

int dc_abi_version(void) { return DC_ABI_VERSION; }

long dc_scratch_floats(const dc_model *m) {
    long n_q = (long)m->n_head * m->head_dim, n_kv = (long)m->n_head_kv * m->head_dim;
    /* x, xn, qkv, o, gate_up */
    return 2L * m->n_embd + (n_q + 2 * n_kv) + n_q + 2L * m->n_ff;
}

/* ---------------------------------------------------------------- matrix-vector products */

/* A unit of parallel work: fn(arg, part, n_parts) does part `part` of `n_parts`. */
typedef struct {
    void (*fn)(const void *arg, int part, int n_parts);
    const void *arg;
} task_t;

typedef struct {
    const float *w, *x;
    float *y;
    int n_in, n_out, accumulate;
} matvec_args;

/* the rows [n * part / n_parts, n * (part + 1) / n_parts) */
static inline int split_at(int n, int part, int n_parts) { return (int)((long)n * part / n_parts); }

/* 16-float vectors (GCC/Clang vector extensions: lowered to whatever SIMD the target has).
 * Several independent accumulators: one would serialize on the FMA latency. */
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4))); /* unaligned access */

static inline v16 load16(const float *p) { return *(const v16u *)p; }
static inline void store16(float *p, v16 v) { *(v16u *)p = v; }

static inline float hsum16(v16 v) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++) s += v[l];
    return s;
}

static inline float dot(const float *a, const float *b, int n) {
    v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 += load16(a + i) * load16(b + i);
        a1 += load16(a + i + 16) * load16(b + i + 16);
        a2 += load16(a + i + 32) * load16(b + i + 32);
        a3 += load16(a + i + 48) * load16(b + i + 48);
    }
    for (; i + 16 <= n; i += 16) a0 += load16(a + i) * load16(b + i);
    float s = hsum16((a0 + a1) + (a2 + a3));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y[i] += alpha * x[i] */
static inline void axpy(float *y, float alpha, const float *x, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) store16(y + i, load16(y + i) + alpha * load16(x + i));
    for (; i < n; i++) y[i] += alpha * x[i];
}

/* y[r] (+)= dot(w[r, :], x) for this part's rows r */
static void matvec_part(const void *arg, int part, int n_parts) {
    const matvec_args *t = arg;
    const int r1 = split_at(t->n_out, part + 1, n_parts);
    for (int r = split_at(t->n_out, part, n_parts); r < r1; r++) {
        const float s = dot(t->w + (size_t)r * t->n_in, t->x, t->n_in);
        t->y[r] = t->accumulate ? t->y[r] + s : s;
    }
}

/* ---------------------------------------------------------------- the thread pool */

static struct {
    int n_threads; /* workers + the caller */
    pid_t pid;     /* a forked child has no workers: rebuild */
    pthread_t th[DC_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int active; /* 1 during a step: workers spin; 0: they sleep */
    atomic_int quit;
    atomic_uint gen;   /* bumped once per task */
    atomic_int pending;
    unsigned start_gen; /* gen when the workers were created (read by them at start) */
    task_t task;
} pool = {.n_threads = 1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *arg) {
    int part = (int)(long)arg;
    unsigned seen = pool.start_gen; /* not the live gen: a task may already be posted */
    for (;;) {
        for (;;) {
            unsigned g = atomic_load_explicit(&pool.gen, memory_order_acquire);
            if (g != seen) {
                seen = g;
                break;
            }
            if (atomic_load(&pool.quit)) return NULL;
            if (!atomic_load(&pool.active)) {
                pthread_mutex_lock(&pool.mu);
                while (!atomic_load(&pool.active) && !atomic_load(&pool.quit) &&
                       atomic_load(&pool.gen) == seen)
                    pthread_cond_wait(&pool.cv, &pool.mu);
                pthread_mutex_unlock(&pool.mu);
                continue;
            }
            cpu_relax();
        }
        pool.task.fn(pool.task.arg, part, pool.n_threads);
        atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_release);
    }
}

static void pool_stop(void) {
    if (pool.pid == getpid()) {
        atomic_store(&pool.quit, 1);
        pthread_mutex_lock(&pool.mu);
        pthread_cond_broadcast(&pool.cv);
        pthread_mutex_unlock(&pool.mu);
        for (int i = 1; i < pool.n_threads; i++) pthread_join(pool.th[i], NULL);
    }
    pool.n_threads = 1;
    atomic_store(&pool.quit, 0);
}

/* Returns 0, or -1 when the threads cannot be started (the pool then runs single-threaded). */
static int pool_resize(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (n_threads > DC_MAX_THREADS) n_threads = DC_MAX_THREADS;
    if (n_threads == pool.n_threads && (n_threads == 1 || pool.pid == getpid())) return 0;
    pool_stop();
    pool.pid = getpid();
    pool.start_gen = atomic_load(&pool.gen);
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&pool.th[i], NULL, worker, (void *)(long)i) != 0) {
            pool.n_threads = i; /* the ones started so far */
            pool_stop();
            return -1;
        }
        pool.n_threads = i + 1;
    }
    pool.n_threads = n_threads;
    return 0;
}

static void pool_begin(void) {
    if (pool.n_threads == 1) return;
    atomic_store(&pool.active, 1);
    pthread_mutex_lock(&pool.mu);
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
}

static void pool_end(void) { atomic_store(&pool.active, 0); }

/* Runs fn over the pool (part 0 on the caller) and returns when every part is done. */
static void pool_run(void (*fn)(const void *, int, int), const void *arg) {
    if (pool.n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool.task = (task_t){fn, arg};
    atomic_store_explicit(&pool.pending, pool.n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.gen, 1, memory_order_release);
    fn(arg, 0, pool.n_threads);
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) cpu_relax();
}

/* y (+)= w . x for a row-major w [n_out, n_in], rows split over the pool */
static void matvec(const float *w, const float *x, float *y, int n_in, int n_out, int acc) {
    const matvec_args t = {w, x, y, n_in, n_out, acc};
    pool_run(matvec_part, &t);
}

/* ---------------------------------------------------------------- small ops */

/* xn = x / sqrt(mean(x^2) + eps) */
static void rms_normalize(const float *x, float *xn, int n, float eps) {
    const float ss = dot(x, x, n);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) xn[i] = x[i] * scale;
}

/* llama.cpp's NORM RoPE: rotate adjacent pairs (v[2j], v[2j+1]) of each head by rope[j]. */
static void rope_heads(float *v, int n_heads, int hd, const float *rope) {
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * hd;
#ifdef DC_MUTANT_ROPE_HALVES /* NEOX pairs (x[j], x[j + hd/2]) */
        for (int j = 0; j < hd / 2; j++) {
            const float c = rope[2 * j], s = rope[2 * j + 1];
            const float a = x[j], b = x[j + hd / 2];
            x[j] = a * c - b * s;
            x[j + hd / 2] = a * s + b * c;
        }
#else
        for (int j = 0; j < hd / 2; j++) {
            const float c = rope[2 * j], s = rope[2 * j + 1];
            const float a = x[2 * j], b = x[2 * j + 1];
            x[2 * j] = a * c - b * s;
            x[2 * j + 1] = a * s + b * c;
        }
#endif
    }
}

typedef struct {
    const dc_model *m;
    const float *q, *kc, *vc, *mask;
    int n_kv;
    float *scores; /* n_kv floats per part */
    float *out;
} attend_args;

/* One query row, this part's heads h:
 * out[h] = softmax(scale * q_h . K[:, g] + mask) . V[:, g] with g = h / (n_head / n_head_kv). */
static void attend_part(const void *arg, int part, int n_parts) {
    const attend_args *a = arg;
    const dc_model *m = a->m;
    const int hd = m->head_dim, group = m->n_head / m->n_head_kv, n_kv = a->n_kv;
    const size_t cell = (size_t)m->n_head_kv * hd;
    float *scores = a->scores + (size_t)part * n_kv;
    const int h1 = split_at(m->n_head, part + 1, n_parts);
    for (int h = split_at(m->n_head, part, n_parts); h < h1; h++) {
#ifdef DC_MUTANT_GQA_TILED
        const int g = h % m->n_head_kv;
#else
        const int g = h / group;
#endif
        const float *qh = a->q + (size_t)h * hd;
        float mx = -INFINITY;
        for (int j = 0; j < n_kv; j++) {
            float s = dot(qh, a->kc + j * cell + (size_t)g * hd, hd);
#ifdef DC_MUTANT_MASK_IGNORED
            s = s * m->kq_scale;
#else
            s = s * m->kq_scale + a->mask[j];
#endif
            scores[j] = s;
            if (s > mx) mx = s;
        }
        float sum = 0.0f;
        for (int j = 0; j < n_kv; j++) {
            scores[j] = expf(scores[j] - mx);
            sum += scores[j];
        }
        float *oh = a->out + (size_t)h * hd;
        for (int d = 0; d < hd; d++) oh[d] = 0.0f;
        for (int j = 0; j < n_kv; j++) axpy(oh, scores[j] / sum, a->vc + j * cell + (size_t)g * hd, hd);
    }
}

/* ---------------------------------------------------------------- the step */

/* Returns 0 on success; -1 for a bad argument (nothing written). `scores` holds n_threads *
 * n_kv floats. */
int dc_decode_one(const dc_model *m, const dc_step *s, float *scores, int n_threads) {
    if (m->n_head_kv <= 0 || m->n_head % m->n_head_kv != 0 || s->n_kv <= 0 || s->cell < 0)
        return -1;
    if (s->token >= m->n_vocab || (s->token < 0 && s->x_in == NULL)) return -1;
    pool_resize(n_threads);

    const int n_embd = m->n_embd, hd = m->head_dim, n_ff = m->n_ff;
    const int n_q = m->n_head * hd, n_kvd = m->n_head_kv * hd;
    float *x = s->scratch, *xn = x + n_embd, *qkv = xn + n_embd, *o = qkv + n_q + 2 * n_kvd;
    float *gu = o + n_q;

    memcpy(x, s->token >= 0 ? m->token_embd + (size_t)s->token * n_embd : s->x_in,
           sizeof(float) * n_embd);
    pool_begin();
    for (int il = 0; il < m->n_layer; il++) {
        rms_normalize(x, xn, n_embd, m->eps);
        matvec(m->wqkv[il], xn, qkv, n_embd, n_q + 2 * n_kvd, 0);
        rope_heads(qkv, m->n_head + m->n_head_kv, hd, s->rope); /* Q and K heads */
        float *kc = s->k_cache[il], *vc = s->v_cache[il];
#ifndef DC_MUTANT_KV_NOT_WRITTEN
        memcpy(kc + (size_t)s->cell * n_kvd, qkv + n_q, sizeof(float) * n_kvd);
        memcpy(vc + (size_t)s->cell * n_kvd, qkv + n_q + n_kvd, sizeof(float) * n_kvd);
#endif
        const attend_args att = {m, qkv, kc, vc, s->mask, s->n_kv, scores, o};
        pool_run(attend_part, &att);
        matvec(m->wo[il], o, x, n_q, n_embd, 1); /* x += Wo . o */
        rms_normalize(x, xn, n_embd, m->eps);
        matvec(m->wgu[il], xn, gu, n_embd, 2 * n_ff, 0);
        for (int i = 0; i < n_ff; i++) { /* silu(gate) * up */
            const float g = gu[i];
            gu[i] = g / (1.0f + expf(-g)) * gu[n_ff + i];
        }
        matvec(m->wdown[il], gu, x, n_ff, n_embd, 1); /* x += Wdown . act */
    }
    rms_normalize(x, s->hidden, n_embd, m->eps);
    for (int i = 0; i < n_embd; i++) s->hidden[i] *= m->output_norm[i];
    if (s->logits != NULL) matvec(m->output, s->hidden, s->logits, n_embd, m->n_vocab, 0);
    pool_end();
    return 0;
}
