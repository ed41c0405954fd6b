/* memcpy and process_vm_writev by the distance of destination past source modulo 4 KiB: the
 * measurement behind copy::slow_string_distance and shm's staged writes
 * (docs/measurements/2026-11-29-copy-distance.md).
 *   cc -O2 scripts/copy-distance.c -o copy-distance && ./copy-distance
 * Hot caches, one thread; best of 3 passes, ns per copy. The process writes its own memory with
 * process_vm_writev (the kernel path is the same as into a peer's). "staged" copies to a buffer
 * 2 KiB before the destination's page offset first, in 256 KiB pieces, as shm does at slow
 * distances. Compare with GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=1000000000. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static char *stage;
enum { PIECE = 256 << 10 };

static void vm_write(char *src, char *dst, size_t n) {
  struct iovec l = {src, n}, r = {dst, n};
  if (process_vm_writev(getpid(), &l, 1, &r, 1, 0) != (ssize_t)n) { perror("process_vm_writev"); exit(1); }
}

static void staged(char *src, char *dst, size_t n) {
  for (size_t o = 0; o < n; o += PIECE) {
    size_t k = n - o < PIECE ? n - o : PIECE;
    char *s = stage + ((((size_t)(dst + o) - 2048) - (size_t)stage) & 4095);
    memcpy(s, src + o, k);
    vm_write(s, dst + o, k);
  }
}

static double best(int how, char *s, char *d, size_t n) {
  int iters = n < 100000 ? 3000 : (int)(200000000 / n) + 3;
  double b = 1e18;
  for (int r = 0; r < 3; r++) {
    double t = now();
    for (int i = 0; i < iters; i++) {
      if (how == 0) memcpy(d, s, n);
      else if (how == 1) vm_write(s, d, n);
      else staged(s, d, n);
      __asm__ volatile("" ::"r"(d) : "memory");
    }
    t = (now() - t) / iters;
    if (t < b) b = t;
  }
  return b;
}

int main(void) {
  size_t big = 1 << 24;
  char *a = aligned_alloc(4096, big), *b = aligned_alloc(4096, big + 8192);
  stage = aligned_alloc(4096, PIECE + 4096);
  if (!a || !b || !stage) { perror("aligned_alloc"); return 1; }
  memset(a, 1, big); memset(b, 2, big + 8192); memset(stage, 3, PIECE + 4096);
  size_t ns[] = {2048, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20};
  int ds[] = {0, 1, 16, 32, 48, 63, 64, -16, 2048};
  const char *what[] = {"memcpy", "process_vm_writev", "process_vm_writev staged"};
  for (int how = 0; how < 3; how++) {
    printf("%s, ns (rows: bytes; columns: dst - src mod 4096)\n%9s", what[how], "");
    for (int k = 0; k < 9; k++) printf("%9d", ds[k]);
    printf("\n");
    for (int j = 0; j < 7; j++) {
      printf("%9zu", ns[j]);
      for (int k = 0; k < 9; k++) printf("%9.0f", best(how, a, b + 4096 + ds[k], ns[j]));
      printf("\n");
    }
  }
  return 0;
}
