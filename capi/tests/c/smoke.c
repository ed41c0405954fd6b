/* The C ABI end to end, run under `fabrun -n 3` by tests/c_program.rs: every collective blocking,
 * nonblocking with fc_wait and nonblocking with an fc_test loop, the in-place forms, half-
 * precision types, user ops (commutative with a context, and non-commutative), split and dup,
 * complex types, tagged send/recv (blocking and nonblocking), several requests in flight, the request arrays
 * (fc_waitall, fc_waitany, fc_testall, fc_testany), and error paths (codes and messages). Any
 * failure prints the call, the code and fabcoll's message, and exits 1. Even ranks join through
 * fc_init (the environment fabrun set), odd ones through fc_init_store with the store, rank and
 * size taken out of it. */
#define _POSIX_C_SOURCE 200809L
#include "fabcoll.h"

#include <complex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

#define CHECK(call)                                                                                         \
    do {                                                                                                    \
        int rc_ = (call);                                                                                   \
        if (rc_ != FC_SUCCESS) {                                                                            \
            fprintf(stderr, "rank %d, line %d: %s -> %s: %s\n", rank, __LINE__, #call, fc_error_string(rc_), \
                    fc_last_error_message());                                                               \
            exit(1);                                                                                        \
        }                                                                                                   \
    } while (0)

#define EXPECT(cond)                                                                         \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "rank %d, line %d: expected %s (mode %d)\n", rank, __LINE__, #cond, mode); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* The mode of a run: 0 blocking, 1 nonblocking + fc_wait, 2 nonblocking + an fc_test loop. */
static int mode;

static void finish(fc_request *req) {
    EXPECT(req != NULL);
    if (mode == 2) {
        int done = 0;
        while (!done) CHECK(fc_test(req, &done));
    }
    CHECK(fc_wait(req));
    int done = 0;
    CHECK(fc_test(req, &done)); /* a finished request stays finished */
    EXPECT(done == 1);
    CHECK(fc_request_free(&req));
    EXPECT(req == NULL);
}

/* fc_NAME(args) when blocking, else fc_iNAME(args, &req) and finish(req). */
#define RUN(name, ...)                                       \
    do {                                                     \
        if (mode == 0) {                                     \
            CHECK(fc_##name(__VA_ARGS__));                   \
        } else {                                             \
            fc_request *req_ = NULL;                         \
            CHECK(fc_i##name(__VA_ARGS__, &req_));           \
            finish(req_);                                    \
        }                                                    \
    } while (0)

#define N 100

static void test_barrier_bcast(fc_comm *c) {
    RUN(barrier, c);
    double buf[N];
    int root = size - 1;
    for (int i = 0; i < N; i++) buf[i] = rank == root ? 2.0 * i + root : -1.0;
    RUN(bcast, buf, N, FC_DOUBLE, root, c);
    for (int i = 0; i < N; i++) EXPECT(buf[i] == 2.0 * i + root);
}

static void test_reduce(fc_comm *c) {
    int root = 1 % size;
    double send[N], recv[N];
    for (int i = 0; i < N; i++) send[i] = rank + i, recv[i] = -1.0;
    RUN(reduce, send, recv, N, FC_DOUBLE, FC_SUM, root, c);
    double base = size * (size - 1) / 2.0;
    for (int i = 0; i < N; i++) EXPECT(rank == root ? recv[i] == size * i + base : recv[i] == -1.0);
    /* In place at the root. */
    for (int i = 0; i < N; i++) recv[i] = rank + i;
    RUN(reduce, rank == root ? FC_IN_PLACE : recv, rank == root ? recv : NULL, N, FC_DOUBLE, FC_SUM, root, c);
    if (rank == root)
        for (int i = 0; i < N; i++) EXPECT(recv[i] == size * i + base);
}

static void test_allreduce(fc_comm *c) {
    double send[N], recv[N];
    for (int i = 0; i < N; i++) send[i] = rank * 1000 + i;
    RUN(allreduce, send, recv, N, FC_DOUBLE, FC_SUM, c);
    for (int i = 0; i < N; i++) EXPECT(recv[i] == 1000.0 * size * (size - 1) / 2 + (double)size * i);
    int32_t v[3] = {rank, -rank, 7};
    RUN(allreduce, FC_IN_PLACE, v, 3, FC_INT32, FC_MAX, c);
    EXPECT(v[0] == size - 1 && v[1] == 0 && v[2] == 7);
    /* Half precision by bit pattern: k.0 for k = 1..8. */
    static const uint16_t f16[] = {0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600, 0x4700, 0x4800};
    static const uint16_t bf16[] = {0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0, 0x4100};
    uint16_t h[4] = {f16[0], f16[0], f16[0], f16[rank]};
    RUN(allreduce, FC_IN_PLACE, h, 4, FC_FLOAT16, FC_SUM, c);
    EXPECT(h[0] == f16[size - 1] && h[3] == f16[size * (size + 1) / 2 - 1]);
    uint16_t b[2] = {bf16[rank], bf16[rank]}, bo[2];
    RUN(allreduce, b, bo, 2, FC_BFLOAT16, FC_MAX, c);
    EXPECT(bo[0] == bf16[size - 1] && bo[1] == bf16[size - 1]);
}

/* Complex numbers reduce as complex numbers (the product is not the parts' products), and counts
 * are in complex elements: rank r holds (r + 1) + i. Every value below is an exact small integer. */
static void test_complex(fc_comm *c) {
    double complex z[N], zo[N];
    for (int i = 0; i < N; i++) z[i] = (rank + 1) + i * I;
    RUN(allreduce, z, zo, N, FC_C_DOUBLE_COMPLEX, FC_PROD, c);
    for (int i = 0; i < N; i++) {
        double complex want = 1;
        for (int k = 1; k <= size; k++) want *= k + i * I;
        EXPECT(zo[i] == want);
    }
    float complex f[3] = {rank + 1 + I, 2 * I, rank}, fo[3];
    RUN(allreduce, f, fo, 3, FC_C_FLOAT_COMPLEX, FC_SUM, c);
    EXPECT(fo[0] == size * (size + 1) / 2 + size * I && fo[1] == 2 * size * I && fo[2] == size * (size - 1) / 2);
    /* allgatherv: rank i sends i + 1 complex numbers, each (i + 1) + k i. */
    size_t counts[8];
    for (int i = 0; i < size; i++) counts[i] = i + 1;
    double complex mine[8], all[36];
    for (int k = 0; k <= rank; k++) mine[k] = (rank + 1) + k * I;
    RUN(allgatherv, mine, all, counts, NULL, FC_C_DOUBLE_COMPLEX, c);
    for (int i = 0, at = 0; i < size; at += i + 1, i++)
        for (int k = 0; k <= i; k++) EXPECT(all[at + k] == (i + 1) + k * I);
}

static void test_gather_scatter(fc_comm *c) {
    int root = 0, p = size;
    int64_t send[2] = {10 * rank, 10 * rank + 1}, recv[2 * 8];
    memset(recv, 0, sizeof recv);
    RUN(gather, send, recv, 2, FC_INT64, root, c);
    if (rank == root)
        for (int i = 0; i < p; i++) EXPECT(recv[2 * i] == 10 * i && recv[2 * i + 1] == 10 * i + 1);
    /* In place at the root: its block already sits at its place. */
    memset(recv, 0, sizeof recv);
    recv[0] = 0, recv[1] = 1;
    RUN(gather, rank == root ? FC_IN_PLACE : send, rank == root ? recv : NULL, 2, FC_INT64, root, c);
    if (rank == root)
        for (int i = 0; i < p; i++) EXPECT(recv[2 * i] == 10 * i && recv[2 * i + 1] == 10 * i + 1);

    /* gatherv: rank i sends i + 1 elements, packed. */
    size_t counts[8], displs[8], total = 0;
    for (int i = 0; i < p; i++) counts[i] = i + 1, displs[i] = total, total += i + 1;
    int32_t vs[8], vr[64];
    for (int k = 0; k <= rank; k++) vs[k] = 100 * rank + k;
    RUN(gatherv, vs, vr, counts, NULL, FC_INT32, root, c);
    if (rank == root)
        for (int i = 0; i < p; i++)
            for (size_t k = 0; k < counts[i]; k++) EXPECT(vr[displs[i] + k] == 100 * i + (int)k);
    memset(vr, 0, sizeof vr);
    vr[0] = 0;
    RUN(gatherv, rank == root ? FC_IN_PLACE : vs, vr, counts, displs, FC_INT32, root, c);
    if (rank == root)
        for (int i = 0; i < p; i++)
            for (size_t k = 0; k < counts[i]; k++) EXPECT(vr[displs[i] + k] == 100 * i + (int)k);

    /* scatter: block i of the root's buffer to rank i. */
    float ss[2 * 8], sr[2] = {-1, -1};
    for (int i = 0; i < 2 * p; i++) ss[i] = (float)i;
    RUN(scatter, rank == root ? ss : NULL, sr, 2, FC_FLOAT, root, c);
    EXPECT(sr[0] == 2 * rank && sr[1] == 2 * rank + 1);

    /* scatterv with gaps: rank i gets i + 1 elements from i * (p + 1). */
    float vsend[8 * 9], vrecv[8];
    for (int i = 0; i < p; i++) displs[i] = (size_t)i * (p + 1);
    for (int i = 0; i < p * (p + 1); i++) vsend[i] = (float)i;
    RUN(scatterv, rank == root ? vsend : NULL, counts, displs, vrecv, FC_FLOAT, root, c);
    for (int k = 0; k <= rank; k++) EXPECT(vrecv[k] == (float)(rank * (p + 1) + k));
}

static void test_allgather_alltoall(fc_comm *c) {
    int p = size;
    uint32_t send[3], recv[3 * 8];
    for (int k = 0; k < 3; k++) send[k] = 10 * rank + k;
    RUN(allgather, send, recv, 3, FC_UINT32, c);
    for (int i = 0; i < 3 * p; i++) EXPECT(recv[i] == (uint32_t)(10 * (i / 3) + i % 3));
    memset(recv, 0, sizeof recv);
    for (int k = 0; k < 3; k++) recv[3 * rank + k] = 10 * rank + k;
    RUN(allgather, FC_IN_PLACE, recv, 3, FC_UINT32, c);
    for (int i = 0; i < 3 * p; i++) EXPECT(recv[i] == (uint32_t)(10 * (i / 3) + i % 3));

    size_t counts[8], displs[8], total = 0;
    for (int i = 0; i < p; i++) counts[i] = p - i, displs[i] = total, total += p - i;
    uint8_t bs[8], br[64];
    for (int k = 0; k < p - rank; k++) bs[k] = (uint8_t)(16 * rank + k);
    RUN(allgatherv, bs, br, counts, NULL, FC_BYTE, c);
    for (int i = 0; i < p; i++)
        for (size_t k = 0; k < counts[i]; k++) EXPECT(br[displs[i] + k] == 16 * i + k);
    memset(br, 0, sizeof br);
    memcpy(br + displs[rank], bs, counts[rank]);
    RUN(allgatherv, FC_IN_PLACE, br, counts, displs, FC_UINT8, c);
    for (int i = 0; i < p; i++)
        for (size_t k = 0; k < counts[i]; k++) EXPECT(br[displs[i] + k] == 16 * i + k);

    /* alltoall: block j to rank j. */
    int16_t as[2 * 8], ar[2 * 8];
    for (int j = 0; j < p; j++) as[2 * j] = 100 * rank + 10 * j, as[2 * j + 1] = 100 * rank + 10 * j + 1;
    RUN(alltoall, as, ar, 2, FC_INT16, c);
    for (int i = 0; i < p; i++) EXPECT(ar[2 * i] == 100 * i + 10 * rank && ar[2 * i + 1] == 100 * i + 10 * rank + 1);
    RUN(alltoall, FC_IN_PLACE, as, 2, FC_INT16, c);
    for (int i = 0; i < p; i++) EXPECT(as[2 * i] == 100 * i + 10 * rank && as[2 * i + 1] == 100 * i + 10 * rank + 1);

    /* alltoallv: rank r sends j + 1 elements to rank j, so receives r + 1 from everyone. */
    size_t sc[8], sd[8], rc[8], rd[8], st = 0, rt = 0;
    for (int j = 0; j < p; j++) sc[j] = j + 1, sd[j] = st, st += j + 1, rc[j] = rank + 1, rd[j] = rt, rt += rank + 1;
    int64_t vs[64], vr[64];
    for (int j = 0; j < p; j++)
        for (size_t k = 0; k < sc[j]; k++) vs[sd[j] + k] = 1000 * rank + 10 * j + k;
    RUN(alltoallv, vs, sc, NULL, vr, rc, rd, FC_INT64, c);
    for (int i = 0; i < p; i++)
        for (size_t k = 0; k < rc[i]; k++) EXPECT(vr[rd[i] + k] == 1000 * i + 10 * rank + (int64_t)k);
}

static void test_reduce_scatter_scan(fc_comm *c) {
    int p = size;
    size_t counts[8], total = 0, off = 0;
    for (int i = 0; i < p; i++) {
        counts[i] = i + 1;
        if (i < rank) off += i + 1;
        total += i + 1;
    }
    double send[64], recv[8];
    for (size_t k = 0; k < total; k++) send[k] = rank + (double)k;
    RUN(reduce_scatter, send, recv, counts, FC_DOUBLE, FC_SUM, c);
    for (int k = 0; k <= rank; k++) EXPECT(recv[k] == p * (double)(off + k) + p * (p - 1) / 2.0);
    RUN(reduce_scatter_block, send, recv, 2, FC_DOUBLE, FC_MIN, c);
    EXPECT(recv[0] == 2.0 * rank && recv[1] == 2.0 * rank + 1);

    int32_t x = rank + 1, y = -1;
    RUN(scan, &x, &y, 1, FC_INT32, FC_SUM, c);
    EXPECT(y == (rank + 1) * (rank + 2) / 2);
    y = -1;
    RUN(exscan, &x, &y, 1, FC_INT32, FC_SUM, c);
    EXPECT(rank == 0 ? y == -1 : y == rank * (rank + 1) / 2);
    int32_t z = rank + 1;
    RUN(scan, FC_IN_PLACE, &z, 1, FC_INT32, FC_PROD, c);
    int32_t fact = 1;
    for (int i = 1; i <= rank + 1; i++) fact *= i;
    EXPECT(z == fact);
    z = rank + 1;
    RUN(exscan, FC_IN_PLACE, &z, 1, FC_INT32, FC_SUM, c);
    EXPECT(rank == 0 ? z == 1 : z == rank * (rank + 1) / 2);
}

/* A commutative sum modulo *ctx, and the non-commutative "left operand wins". */
static void sum_mod(const void *in, void *inout, size_t count, void *ctx) {
    const int64_t *a = in;
    int64_t *b = inout, m = *(const int64_t *)ctx;
    for (size_t i = 0; i < count; i++) b[i] = (a[i] + b[i]) % m;
}

static void first(const void *in, void *inout, size_t count, void *ctx) {
    (void)ctx;
    memcpy(inout, in, count * sizeof(double));
}

static void test_user_ops(fc_comm *c) {
    static int64_t modulus = 1000003;
    fc_op sum, left;
    CHECK(fc_op_create(sum_mod, 1, &modulus, &sum));
    CHECK(fc_op_create(first, 0, NULL, &left));
    int64_t v[N], w[N];
    for (int i = 0; i < N; i++) v[i] = 400000 * (int64_t)rank + i;
    RUN(allreduce, v, w, N, FC_INT64, sum, c);
    int64_t all = 0;
    for (int r = 0; r < size; r++) all += 400000 * (int64_t)r;
    for (int i = 0; i < N; i++) {
        int64_t want = 0;
        for (int r = 0; r < size; r++) want = (want + 400000 * (int64_t)r + i) % modulus;
        EXPECT(w[i] == want);
    }
    double d[N];
    for (int i = 0; i < N; i++) d[i] = rank * 10.0 + i;
    RUN(allreduce, FC_IN_PLACE, d, N, FC_DOUBLE, left, c);
    for (int i = 0; i < N; i++) EXPECT(d[i] == (double)i); /* rank 0's values */
    RUN(scan, FC_IN_PLACE, v, N, FC_INT64, left, c);
    EXPECT(v[0] == 0 && v[N - 1] == N - 1);
    CHECK(fc_op_free(&sum));
    CHECK(fc_op_free(&left));
    EXPECT(sum == FC_OP_NULL);
    (void)all;
}

static void test_split_dup(fc_comm *world) {
    fc_comm *half = NULL, *dup = NULL, *none = (fc_comm *)world;
    /* Even and odd ranks, in reverse order of world rank. */
    CHECK(fc_comm_split(world, rank % 2, -rank, &half));
    int hr, hs;
    CHECK(fc_comm_rank(half, &hr));
    CHECK(fc_comm_size(half, &hs));
    int want_size = (size - rank % 2 + 1) / 2, above = 0;
    for (int r = rank + 2; r < size; r += 2) above++;
    EXPECT(hs == want_size && hr == above);
    int32_t s = rank, sum = 0;
    RUN(allreduce, &s, &sum, 1, FC_INT32, FC_SUM, half);
    int32_t want = 0;
    for (int r = rank % 2; r < size; r += 2) want += r;
    EXPECT(sum == want);
    CHECK(fc_comm_dup(half, &dup));
    RUN(allreduce, FC_IN_PLACE, &s, 1, FC_INT32, FC_SUM, dup);
    EXPECT(s == want);
    CHECK(fc_comm_free(&dup));
    CHECK(fc_comm_free(&half));
    EXPECT(half == NULL && dup == NULL);
    /* FC_UNDEFINED takes part and gets no communicator. */
    CHECK(fc_comm_split(world, rank == 0 ? FC_UNDEFINED : 0, 0, &none));
    EXPECT(rank == 0 ? none == NULL : none != NULL);
    if (none) {
        int ns;
        CHECK(fc_comm_size(none, &ns));
        EXPECT(ns == size - 1);
        CHECK(fc_comm_free(&none));
    }
}

/* Several requests in flight at once, finished in reverse order. */
/* Tagged transfers on the ring: blocking with small (eager) messages, which complete before their
 * receives; nonblocking also with a large one (zero-copy), both directions in flight at once. */
static void test_send_recv(fc_comm *c) {
    enum { BIG = 100000 };
    static double out[BIG], in[BIG];
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int n = mode == 0 ? N : BIG;
    for (int i = 0; i < n; i++) out[i] = 1000.0 * rank + i, in[i] = -1.0;
    if (mode == 0) {
        CHECK(fc_send(out, n, FC_DOUBLE, right, 5, c));
        CHECK(fc_recv(in, n, FC_DOUBLE, left, 5, c));
    } else {
        fc_request *r = NULL, *s = NULL;
        CHECK(fc_irecv(in, n, FC_DOUBLE, left, 6, c, &r));
        CHECK(fc_isend(out, n, FC_DOUBLE, right, 6, c, &s));
        finish(s);
        finish(r);
    }
    for (int i = 0; i < n; i++) EXPECT(in[i] == 1000.0 * left + i);
    /* Both directions in one call (a zero-copy one in mode 1), the sender named, then from any source. */
    for (int any = 0; any < 2; any++) {
        int from = -1;
        for (int i = 0; i < n; i++) in[i] = -1.0;
        CHECK(fc_sendrecv(out, n, FC_DOUBLE, right, 8 + any, in, n, FC_DOUBLE, any ? FC_ANY_SOURCE : left, 8 + any, c,
                          &from));
        EXPECT(from == left);
        for (int i = 0; i < n; i++) EXPECT(in[i] == 1000.0 * left + i);
    }
    EXPECT(fc_send(out, 1, FC_DOUBLE, rank, 0, c) == FC_ERR_ARG);
    EXPECT(fc_send(out, 1, FC_DOUBLE, right, -1, c) == FC_ERR_ARG);
    EXPECT(fc_recv(in, 1, FC_DOUBLE, size, 0, c) == FC_ERR_ARG);
    EXPECT(fc_recv(in, 1, FC_DOUBLE, FC_ANY_SOURCE, 0, c) == FC_ERR_ARG);
    EXPECT(fc_probe(rank, 0, c, NULL, NULL) == FC_ERR_ARG);
    EXPECT(fc_iprobe(FC_ANY_SOURCE, 0, c, NULL, NULL, NULL) == FC_ERR_ARG);
    EXPECT(fc_sendrecv(out, 1, FC_DOUBLE, right, 0, in, 0, FC_DOUBLE, FC_ANY_SOURCE, 0, c, NULL) == FC_ERR_ARG);
    /* From any source: every other rank sends to rank 0 with tag 7 + its rank, and rank 0 probes
     * for any sender and any tag, then receives what the probe named; each sender comes once. */
    if (rank == 0) {
        int seen = 0;
        for (int k = 1; k < size; k++) {
            int src = -1, tag = -1, flag = 0;
            if (k == 1) {
                /* The first by polling (MPI_Iprobe), the others by waiting. */
                while (!flag) CHECK(fc_iprobe(FC_ANY_SOURCE, FC_ANY_TAG, c, &flag, &src, &tag));
            } else {
                CHECK(fc_probe(FC_ANY_SOURCE, FC_ANY_TAG, c, &src, &tag));
            }
            EXPECT(src > 0 && src < size && !(seen & (1 << src)) && tag == 7 + src);
            seen |= 1 << src;
            CHECK(fc_recv(in, n, FC_DOUBLE, src, tag, c));
            for (int i = 0; i < n; i++) EXPECT(in[i] == 1000.0 * src + i);
        }
    } else {
        CHECK(fc_send(out, n, FC_DOUBLE, 0, 7 + rank, c));
    }
}

static void test_outstanding(fc_comm *c) {
    static double big[1 << 16], out[1 << 16];
    int32_t root_data[4] = {0, 0, 0, 0};
    for (int i = 0; i < 1 << 16; i++) big[i] = rank + i;
    if (rank == 0) root_data[0] = 1, root_data[3] = 4;
    fc_request *a = NULL, *b = NULL, *d = NULL;
    CHECK(fc_iallreduce(big, out, 1 << 16, FC_DOUBLE, FC_SUM, c, &a));
    CHECK(fc_ibcast(root_data, 4, FC_INT32, 0, c, &b));
    CHECK(fc_ibarrier(c, &d));
    CHECK(fc_wait(d));
    CHECK(fc_wait(b));
    CHECK(fc_wait(a));
    CHECK(fc_request_free(&d));
    CHECK(fc_request_free(&b));
    CHECK(fc_request_free(&a));
    EXPECT(root_data[0] == 1 && root_data[3] == 4);
    for (int i = 0; i < 1 << 16; i += 4099) EXPECT(out[i] == size * (size - 1) / 2.0 + (double)size * i);
    /* A request freed unfinished is finished first. */
    CHECK(fc_iallreduce(big, out, 1 << 16, FC_DOUBLE, FC_MAX, c, &a));
    CHECK(fc_request_free(&a));
    EXPECT(a == NULL && out[5] == size - 1 + 5.0);
}

#define EXPECT_ERR(code, call, words)                                                             \
    do {                                                                                          \
        int rc_ = (call);                                                                         \
        if (rc_ != (code) || strstr(fc_last_error_message(), (words)) == NULL) {                  \
            fprintf(stderr, "rank %d, line %d: %s gave %d (%s), expected %d and a message with '%s'\n", \
                    rank, __LINE__, #call, rc_, fc_last_error_message(), (code), (words));         \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static void test_errors(fc_comm *c) {
    double x[4] = {0, 0, 0, 0}, y[4];
    fc_request *req = (fc_request *)x;
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce(x, y, 4, 999, FC_SUM, c), "datatype");
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce(x, y, 4, FC_DOUBLE, 12345, c), "op");
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce(x, y, 4, FC_DOUBLE, FC_BAND, c), "bitwise");
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce(x, y, 2, FC_C_DOUBLE_COMPLEX, FC_MAX, c), "not ordered");
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce(NULL, y, 4, FC_DOUBLE, FC_SUM, c), "NULL");
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce(x, x + 1, 2, FC_DOUBLE, FC_SUM, c), "overlap");
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce(x, y, 4, FC_DOUBLE, FC_SUM, NULL), "comm is NULL");
    EXPECT_ERR(FC_ERR_ARG, fc_bcast(x, 4, FC_DOUBLE, size, c), "out of range");
    EXPECT_ERR(FC_ERR_ARG, fc_allreduce((char *)x + 1, y, 2, FC_DOUBLE, FC_SUM, c), "aligned");
    EXPECT_ERR(FC_ERR_ARG, fc_scatter(x, FC_IN_PLACE, 1, FC_DOUBLE, 0, c), "in-place");
    EXPECT_ERR(FC_ERR_ARG, fc_iallreduce(x, y, 4, 999, FC_SUM, c, &req), "datatype");
    EXPECT(req == NULL);
    fc_op sum = FC_SUM;
    EXPECT_ERR(FC_ERR_ARG, fc_op_free(&sum), "not a user op");
    EXPECT_ERR(FC_ERR_ARG, fc_comm_split(c, -5, 0, NULL), "NULL");
    EXPECT_ERR(FC_ERR_ARG, fc_set_setting("NO_SUCH_KNOB", "1"), "not a fabcoll setting");
    EXPECT_ERR(FC_ERR_ARG, fc_set_setting("FABCOLL_TIMEOUT", "soon"), "FABCOLL_TIMEOUT");
    EXPECT(strcmp(fc_error_string(FC_ERR_TIMEOUT), "timed out waiting for a peer") == 0);
    EXPECT(strcmp(fc_error_string(4242), "unknown error code") == 0);
    /* The communicator is still fine after argument errors. */
    x[0] = 1;
    CHECK(fc_allreduce(x, y, 1, FC_DOUBLE, FC_SUM, c));
    EXPECT(y[0] == size);
}

/* The array forms, as MPI's: finished requests are freed and their handles set to NULL. A ring of
 * sends and receives plus a collective, finished by fc_waitany one at a time (each index once),
 * by fc_testany/fc_testall polling, and by fc_waitall with NULL entries. */
static void test_request_arrays(fc_comm *c) {
    enum { M = 5000 };
    static double out[M], in[M], sum_in[4], sum_out[4];
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < M; i++) out[i] = 100.0 * rank + round + i, in[i] = -1.0;
        for (int i = 0; i < 4; i++) sum_in[i] = rank + i, sum_out[i] = -1.0;
        fc_request *reqs[4] = {NULL, NULL, NULL, NULL}; /* reqs[2] stays NULL */
        CHECK(fc_irecv(in, M, FC_DOUBLE, left, 9, c, &reqs[0]));
        CHECK(fc_isend(out, M, FC_DOUBLE, right, 9, c, &reqs[1]));
        CHECK(fc_iallreduce(sum_in, sum_out, 4, FC_DOUBLE, FC_SUM, c, &reqs[3]));
        if (round == 0) {
            int seen[4] = {0, 0, 0, 0}, index = -2;
            for (int k = 0; k < 3; k++) {
                CHECK(fc_waitany(4, reqs, &index));
                EXPECT(index >= 0 && index < 4 && index != 2 && !seen[index] && reqs[index] == NULL);
                if (index >= 0 && index < 4) seen[index] = 1;
            }
            CHECK(fc_waitany(4, reqs, &index)); /* every handle NULL now */
            EXPECT(index == FC_UNDEFINED);
        } else if (round == 1) {
            int index = FC_UNDEFINED, done = 0, finished = 0;
            while (finished < 1) {
                CHECK(fc_testany(4, reqs, &index));
                if (index != FC_UNDEFINED) {
                    finished++;
                    EXPECT(reqs[index] == NULL);
                }
            }
            while (!done) CHECK(fc_testall(4, reqs, &done));
        } else {
            CHECK(fc_waitall(4, reqs));
        }
        for (int i = 0; i < 4; i++) EXPECT(reqs[i] == NULL);
        for (int i = 0; i < M; i++) EXPECT(in[i] == 100.0 * left + round + i);
        for (int i = 0; i < 4; i++) EXPECT(sum_out[i] == size * (size - 1) / 2.0 + (double)size * i);
    }
    CHECK(fc_waitall(0, NULL));
    int idx = 0;
    EXPECT_ERR(FC_ERR_ARG, fc_waitall(-1, NULL), "negative");
    EXPECT_ERR(FC_ERR_ARG, fc_waitany(2, NULL, &idx), "requests is NULL");
    EXPECT_ERR(FC_ERR_ARG, fc_testall(0, NULL, NULL), "done is NULL");
    fc_request *twice[2] = {NULL, NULL};
    CHECK(fc_ibarrier(c, &twice[0]));
    twice[1] = twice[0];
    EXPECT_ERR(FC_ERR_ARG, fc_waitall(2, twice), "appears earlier");
    twice[1] = NULL;
    CHECK(fc_waitall(2, twice));
}

/* Joins the job: fc_init on even ranks, fc_init_store on odd ones (the environment's store,
 * rank and size removed first, so they can only come from the arguments). */
static fc_comm *join(void) {
    fc_comm *world = NULL;
    const char *r = getenv("FABCOLL_RANK"), *n = getenv("FABCOLL_SIZE"), *store = getenv("FABCOLL_STORE");
    if (r == NULL || n == NULL || store == NULL) {
        fprintf(stderr, "smoke: run it under fabrun\n");
        exit(1);
    }
    CHECK(fc_set_setting("FABCOLL_TIMEOUT", "60"));
    rank = atoi(r);
    if (rank % 2 == 0) {
        CHECK(fc_init(&world));
        return world;
    }
    char addr[512];
    snprintf(addr, sizeof addr, "%s", store);
    int size_arg = atoi(n);
    unsetenv("FABCOLL_RANK");
    unsetenv("FABCOLL_SIZE");
    unsetenv("FABCOLL_STORE");
    CHECK(fc_init_store(addr, rank, size_arg, &world));
    return world;
}

int main(void) {
    fc_comm *world = join();
    CHECK(fc_comm_rank(world, &rank));
    CHECK(fc_comm_size(world, &size));
    if (size > 8) {
        fprintf(stderr, "smoke: at most 8 ranks\n");
        return 1;
    }
    for (mode = 0; mode < 3; mode++) {
        test_barrier_bcast(world);
        test_reduce(world);
        test_allreduce(world);
        test_complex(world);
        test_gather_scatter(world);
        test_allgather_alltoall(world);
        test_reduce_scatter_scan(world);
        test_user_ops(world);
        test_split_dup(world);
        test_send_recv(world);
    }
    test_outstanding(world);
    test_request_arrays(world);
    test_errors(world);
    CHECK(fc_comm_free(&world));
    printf("smoke: rank %d of %d ok\n", rank, size);
    return 0;
}
