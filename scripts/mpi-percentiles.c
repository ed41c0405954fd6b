/* Open MPI's side of scripts/bench-contention.sh: per-call latency percentiles of one collective.
 * usage: mpi-percentiles OP BYTES ITERS   (OP: allreduce | bcast | allgather | alltoall)
 * Warm-up (ITERS/10 + 1 calls), a barrier, then ITERS back-to-back calls, each timed on its own on
 * every rank (as `fabcoll bench --sync none` times its per-call pass). Prints
 * "bytes avg_us p50_us p99_us": the mean over all ranks' calls, and the percentiles over them.
 * A measuring tool for the script, not a dependency of fabcoll. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run(const char *op, void *s, void *r, int count, int p) {
    if (!strcmp(op, "allreduce")) MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "bcast")) MPI_Bcast(s, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "allgather")) MPI_Allgather(s, count / p, MPI_FLOAT, r, count / p, MPI_FLOAT, MPI_COMM_WORLD);
    else if (!strcmp(op, "alltoall")) MPI_Alltoall(s, count / p, MPI_FLOAT, r, count / p, MPI_FLOAT, MPI_COMM_WORLD);
    else { fprintf(stderr, "unknown op %s\n", op); MPI_Abort(MPI_COMM_WORLD, 2); }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (argc < 4) { if (!rank) fprintf(stderr, "usage: mpi-percentiles OP BYTES ITERS\n"); MPI_Finalize(); return 2; }
    const char *op = argv[1];
    long bytes = atol(argv[2]);
    int iters = atoi(argv[3]);
    int count = (int)(bytes / sizeof(float));
    if (count < 1) count = 1;
    if ((!strcmp(op, "allgather") || !strcmp(op, "alltoall")) && count < p) count = p;
    size_t cap = (size_t)count * sizeof(float) * (size_t)p + 64;
    float *s = malloc(cap), *r = malloc(cap);
    double *t = malloc(sizeof(double) * (size_t)iters), *all = malloc(sizeof(double) * (size_t)iters * (size_t)p);
    for (size_t i = 0; i < cap / sizeof(float); i++) { s[i] = (float)(rank + i % 7); r[i] = 0; }
    for (int i = 0; i < iters / 10 + 1; i++) run(op, s, r, count, p);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters; i++) {
        double t0 = MPI_Wtime();
        run(op, s, r, count, p);
        t[i] = (MPI_Wtime() - t0) * 1e6;
    }
    MPI_Gather(t, iters, MPI_DOUBLE, all, iters, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (!rank) {
        size_t n = (size_t)iters * (size_t)p;
        double sum = 0;
        for (size_t i = 0; i < n; i++) sum += all[i];
        qsort(all, n, sizeof(double), cmp);
        /* nearest rank, as fabcoll bench: the ceil(q n)-th smallest */
        printf("%ld %.2f %.2f %.2f\n", bytes, sum / (double)n, all[(n + 1) / 2 - 1], all[(n * 99 + 99) / 100 - 1]);
    }
    free(s); free(r); free(t); free(all);
    MPI_Finalize();
    return 0;
}
