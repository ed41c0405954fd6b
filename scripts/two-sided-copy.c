/* One large node-local transfer copied by one core or by both: the measurement behind the
 * "two-sided copy" direction in docs/measurements/2026-11-29-copy-distance.md.
 *   cc -O2 scripts/two-sided-copy.c -o two-sided-copy && ./two-sided-copy [MiB] [huge]
 * A child holds the destination (heap memory, touched); the parent holds the source. Alternating,
 * 20 transfers: "push" writes all of it with process_vm_writev from the parent; "split" writes the
 * first half from the parent while the child reads the second half with process_vm_readv. With
 * a second argument both buffers are advised MADV_HUGEPAGE first. Prints the median of each. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  size_t n = (size_t)(argc > 1 ? atol(argv[1]) : 16) << 20;
  /* ctl[0]: round counter (odd: a transfer runs), ctl[1]: child ready, ctl[2]: split?,
   * ctl[3]: transfers the child finished */
  _Atomic int *ctl = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char *src = aligned_alloc(2 << 20, n), *dst = aligned_alloc(2 << 20, n);
  if (ctl == MAP_FAILED || !src || !dst) { perror("alloc"); return 1; }
  if (argc > 2) { madvise(src, n, MADV_HUGEPAGE); madvise(dst, n, MADV_HUGEPAGE); }
  memset(src, 1, n);
  pid_t parent = getpid(), child = fork();
  if (child == 0) {
    memset(dst, 0, n);
    ctl[1] = 1;
    for (int it = 0;; it++) {
      while (ctl[0] == 2 * it) {}
      if (ctl[0] < 0) _exit(0);
      if (ctl[2]) {
        struct iovec l = {dst + n / 2, n - n / 2}, r = {src + n / 2, n - n / 2};
        if (process_vm_readv(parent, &l, 1, &r, 1, 0) != (ssize_t)(n - n / 2)) { perror("readv"); _exit(1); }
      }
      ctl[3]++;
      while (ctl[0] == 2 * it + 1) {}
    }
  }
  while (!ctl[1]) {}
  double t[2][10];
  for (int it = 0; it < 20; it++) {
    int split = it % 2;
    ctl[2] = split;
    double t0 = now();
    ctl[0] = 2 * it + 1;
    size_t k = split ? n / 2 : n;
    struct iovec l = {src, k}, r = {dst, k};
    if (process_vm_writev(child, &l, 1, &r, 1, 0) != (ssize_t)k) { perror("writev"); return 1; }
    while (ctl[3] != it + 1) {}
    t[split][it / 2] = now() - t0;
    ctl[0] = 2 * it + 2;
  }
  ctl[0] = -1;
  waitpid(child, 0, 0);
  qsort(t[0], 10, sizeof(double), cmp);
  qsort(t[1], 10, sizeof(double), cmp);
  printf("%zu MiB%s: push %.2f ms, split (push half, pull half) %.2f ms, median of 10 each\n", n >> 20,
         argc > 2 ? " (huge pages advised)" : "", t[0][5], t[1][5]);
  return 0;
}
