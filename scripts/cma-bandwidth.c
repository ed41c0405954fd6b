/* process_vm_writev (CMA) against memcpy, into 4 KiB pages and into transparent huge pages: the
 * measurement behind shm's huge pages for reused buffers (docs/measurements/2026-11-29-huge-pages.md).
 *   cc -O2 scripts/cma-bandwidth.c -o cma-bandwidth && ./cma-bandwidth 16777216 [rounds]
 * A child process holds the target buffer; the parent writes it `iters` times with one
 * process_vm_writev per pass, and copies the same bytes between two of its own buffers with memcpy.
 * With HUGE=1 the target is advised MADV_HUGEPAGE before it is first touched. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static char *buffer(size_t n, int huge, int fill) {
  char *b = aligned_alloc(2 << 20, n);
  if (!b) { perror("aligned_alloc"); exit(1); }
  if (huge && madvise(b, n, MADV_HUGEPAGE) != 0) perror("madvise");
  memset(b, fill, n);
  return b;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s BYTES [ROUNDS]\n", argv[0]); return 2; }
  size_t n = (size_t)atol(argv[1]);
  int rounds = argc > 2 ? atoi(argv[2]) : 3, iters = 20, huge = getenv("HUGE") != NULL;
  n = (n + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  char *src = buffer(n, 0, 2), *dst = buffer(n, 0, 1);
  int pfd[2];
  if (pipe(pfd) != 0) { perror("pipe"); return 1; }
  pid_t pid = fork();
  if (pid == 0) {
    void *target = buffer(n, huge, 3);
    if (write(pfd[1], &target, sizeof target) != sizeof target) return 1;
    pause();
    return 0;
  }
  void *target;
  if (read(pfd[0], &target, sizeof target) != sizeof target) { perror("read"); return 1; }
  for (int r = 0; r < rounds; r++) {
    double t0 = now();
    for (int i = 0; i < iters; i++) memcpy(dst, src, n);
    double t1 = now();
    for (int i = 0; i < iters; i++) {
      struct iovec l = {src, n}, t = {target, n};
      if (process_vm_writev(pid, &l, 1, &t, 1, 0) != (ssize_t)n) { perror("process_vm_writev"); kill(pid, 9); return 1; }
    }
    double t2 = now();
    printf("bytes %zu target %s: memcpy %.2f GB/s, process_vm_writev %.2f GB/s\n", n, huge ? "huge pages" : "4 KiB pages",
           n * (double)iters / (t1 - t0) / 1e9, n * (double)iters / (t2 - t1) / 1e9);
  }
  kill(pid, 9);
  return 0;
}
