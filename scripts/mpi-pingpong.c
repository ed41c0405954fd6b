/* MPI's side of `fabcoll pingpong` (scripts/bench-p2p.sh): the same measurement with MPI_Send and
 * MPI_Recv between ranks 0 and 1. Per size (doubling from MIN to MAX bytes), ROUNDS rounds of round
 * trips after a barrier (1000 up to 64 KiB, then about 64 MiB moved, at least 10) and one warm-up
 * round trip; rank 0 prints "bytes median_us best_us MB/s" of half a round trip.
 * Usage: mpi-pingpong MIN MAX ROUNDS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (argc < 4 || p < 2) {
        if (me == 0) fprintf(stderr, "usage: mpi-pingpong MIN MAX ROUNDS (at least 2 ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long min = atol(argv[1]), max = atol(argv[2]);
    int rounds = atoi(argv[3]);
    char *buf = calloc(max, 1);
    double *t = calloc(rounds, sizeof *t);
    if (me == 0) printf("%10s %10s %10s %10s\n", "bytes", "median_us", "best_us", "MB/s");
    for (long n = min < 1 ? 1 : min; n <= max; n *= 2) {
        long iters = n <= 65536 ? 1000 : (64L << 20) / n;
        if (iters < 10) iters = 10;
        for (int r = 0; r <= rounds; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (long i = 0; i < (r == 0 ? 1 : iters); i++) {
                if (me == 0) {
                    MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (me == 1) {
                    MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
                }
            }
            if (r > 0) t[r - 1] = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
        }
        if (me == 0) {
            qsort(t, rounds, sizeof *t, cmp);
            printf("%10ld %10.2f %10.2f %10.1f\n", n, t[rounds / 2], t[0], n / t[rounds / 2]);
        }
    }
    free(t);
    free(buf);
    MPI_Finalize();
    return 0;
}
